"""The ``gpuguard`` command: one entry point, one sub-command module per job.

Each module in ``SUBCOMMAND_MODULES`` exposes ``register(subparsers)``, which adds its
sub-command(s) and sets ``func`` (``args -> exit code``) as the parser default.  Keeping
registration in the modules keeps this file free of every sub-command's flags.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "gpuguard.webhook.cli.evaluate",
    "gpuguard.webhook.server.command",
    "gpuguard.certs.cli",
    "gpuguard.webhook.cli.webhook_config",
    "gpuguard.webhook.cli.audit.command",
    "gpuguard.webhook.cli.explain",
    "gpuguard.webhook.cli.test",
    "gpuguard.webhook.cli.fix",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuguard",
        description="Admission webhook and audit tool that keeps ML workloads from burning GPU budget.",
    )
    from gpuguard.webhook import __version__

    parser.add_argument("--version", action="version", version=f"gpuguard {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
