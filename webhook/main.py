"""The ``gpuguard`` command: one entry point, one module per verb, imported only when chosen.

``VERBS`` names every verb, the module that implements it and its one-line help.  The verb is
found in ``argv`` before any parser is built, and only its module is imported: ``gpuguard
--help`` lists the verbs from the table alone, and ``gpuguard evaluate`` never loads the
server, the kubernetes client or CEL.  Each module exposes ``register(subparsers)``, which adds
its verb(s) with their flags and sets ``func`` (``args -> exit code``) as the parser default;
registration stays light (argparse and the stdlib) and each verb imports what it needs when it
runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any

from gpuguard.webhook.cli.common import set_program
from gpuguard.webhook.exitcodes import ExitCode


@dataclass(frozen=True)
class Verb:
    """Where a verb lives and what ``gpuguard --help`` says about it."""

    module: str
    help: str


VERBS: dict[str, Verb] = {
    "evaluate": Verb("gpuguard.webhook.cli.evaluate", "print the decision for each object in a manifest"),
    "serve": Verb("gpuguard.webhook.server.command", "run the admission webhook server (HTTPS)"),
    "certs": Verb("gpuguard.certs.cli", "create, inject and renew the webhook's TLS certificates"),
    "webhook-config": Verb("gpuguard.webhook.cli.webhook_config",
                           "print the Mutating/ValidatingWebhookConfiguration YAML"),
    "audit": Verb("gpuguard.webhook.cli.audit.command",
                  "what gpuguard would change and reject, for manifests or a live cluster"),
    "policies": Verb("gpuguard.webhook.cli.explain", "list every policy with its phase and default action"),
    "explain": Verb("gpuguard.webhook.cli.explain", "what a policy checks, why, its settings and an example"),
    "test": Verb("gpuguard.webhook.cli.test", "run policy test suites (cases of manifest + expected decision)"),
    "fix": Verb("gpuguard.webhook.cli.fix", "apply gpuguard's mutations to manifest files in place"),
    "scan": Verb("gpuguard.webhook.scan.command",
                 "background scan: keep PolicyReports and GPU cost metrics of the cluster's workloads current"),
    "version": Verb("gpuguard.webhook.cli.version", "print the version and the commit it was built from"),
    "completion": Verb("gpuguard.webhook.cli.completion", "print the shell completion script (bash, zsh, fish)"),
}
#: The program's name in usage lines: ``kubectl gpuguard`` when kubectl runs the plugin (``kubectl-gpuguard``).
PROG = "gpuguard"
PLUGIN_PROG = "kubectl gpuguard"


class _Subparsers:
    """``add_subparsers()`` as a verb module sees it: the table's one-line help is filled in."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if name in VERBS:
            kwargs.setdefault("help", VERBS[name].help)
        return self._subparsers.add_parser(name, **kwargs)


class _VersionAction(argparse.Action):
    """``--version``: the version and commit, found only when asked (the commit may ask git)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from gpuguard.webhook import commit, version

        sys.stdout.write(version_line(version(), commit()) + "\n")
        parser.exit()


def version_line(version: str, commit: str) -> str:
    """What ``gpuguard --version`` prints: ``gpuguard 0.1.0 (commit 6d3de86a1b2c)``."""
    return f"gpuguard {version} (commit {commit})"


def chosen_verb(argv: list[str]) -> str | None:
    """The verb named in ``argv``: the first word that is not a flag (the top level's flags take no value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(verb: str | None = None, prog: str = PROG) -> argparse.ArgumentParser:
    """The parser with ``verb``'s module registered, every other verb listed from the table.

    ``verb=None`` registers every verb (what tests and docs checks want: the whole command).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Admission webhook and audit tool that keeps ML workloads from burning GPU budget.",
    )
    parser.add_argument("--version", action=_VersionAction, help="show the version and the commit, and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = list(dict.fromkeys(VERBS[v].module for v in VERBS)) if verb is None else (
        [VERBS[verb].module] if verb in VERBS else [])
    for module_name in wanted:
        importlib.import_module(module_name).register(_Subparsers(subparsers))
    for name, entry in VERBS.items():
        if name not in subparsers.choices:  # listed in `gpuguard --help`, its flags never loaded
            subparsers.add_parser(name, help=entry.help, add_help=False)
    return parser


def _completion_parser(line: str, prog: str) -> argparse.ArgumentParser:
    """The parser a TAB at the end of ``line`` needs: the verb typed whole, or none (verbs are listed anyway).

    As for a run, only the chosen verb's module is imported: a TAB costs what ``VERB --help`` costs.
    """
    typed = line.split()[1:]
    if typed and not line.endswith(" "):
        typed = typed[:-1]  # the word being completed is not chosen yet
    return build_parser(chosen_verb(typed) or "", prog)


def _complete_and_exit(prog: str) -> None:
    """On TAB (``_ARGCOMPLETE`` set by the script of ``gpuguard completion``): print the completions, exit."""
    import argcomplete

    line = os.environ.get("COMP_LINE", "")
    argcomplete.autocomplete(_completion_parser(line[:int(os.environ.get("COMP_POINT", len(line)))], prog))
    sys.exit(ExitCode.USAGE)  # autocomplete exits itself; reached only when it had nothing to do


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    if argv is None and os.environ.get("_ARGCOMPLETE"):
        _complete_and_exit(prog)
    argv = sys.argv[1:] if argv is None else argv
    set_program(prog)
    parser = build_parser(chosen_verb(argv) or "", prog)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED


def kubectl_plugin() -> int:
    """``kubectl-gpuguard``: kubectl runs it for ``kubectl gpuguard …``; the same command, named as typed."""
    return main(prog=PLUGIN_PROG)


def kubectl_complete() -> int:
    """``kubectl_complete-gpuguard``: what kubectl (1.26+) runs for TAB after ``kubectl gpuguard``.

    kubectl passes the words typed after ``gpuguard``, the last being the one completed (empty for a
    new word), and reads cobra's answer: one completion a line, then ``:`` and a directive (2: no
    space after a completion ending in ``/`` or ``=``; 4: no file names from the shell, argcomplete
    gives them).  The completions are argcomplete's, from the same parser as ``gpuguard completion``.
    """
    import io
    import shlex

    import argcomplete

    words = sys.argv[1:] or [""]
    line = " ".join(["gpuguard", *(shlex.quote(w) for w in words[:-1]), words[-1]])
    os.environ.update({"_ARGCOMPLETE": "1", "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_SUPPRESS_SPACE": "1",
                       "COMP_LINE": line, "COMP_POINT": str(len(line))})
    answer = io.StringIO()
    argcomplete.autocomplete(_completion_parser(line, PLUGIN_PROG), output_stream=answer,
                             exit_method=lambda *_: None)
    completions = [c.replace("\\", "") for c in answer.getvalue().split("\n") if c]
    directive = 4 | (2 if any(c.endswith(("/", "=")) for c in completions) else 0)
    sys.stdout.write("".join(f"{c}\n" for c in completions) + f":{directive}\n")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
