"""``gpuguard version``: the version and commit, as ``kubectl version`` and ``kubectl gpuguard version`` say it.

``gpuguard --version`` prints the same line; the verb adds ``-o json`` for scripts (a release check
that compares the commit with the one it deployed, a bug report template).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuguard.webhook.cli.common import add_common_flags, guard
from gpuguard.webhook.exitcodes import ExitCode


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("version", description="Print gpuguard's version and the commit it was built "
                                   "from (the same line as `gpuguard --version`).")
    add_common_flags(parser, ("text", "json"))
    parser.set_defaults(func=guard(run))


def run(args: argparse.Namespace) -> int:
    from gpuguard.webhook import commit, version

    if args.format == "json":
        import json

        sys.stdout.write(json.dumps({"version": version(), "commit": commit()}, indent=2) + "\n")
    else:
        sys.stdout.write(f"gpuguard {version()} (commit {commit()})\n")
    return ExitCode.OK
