"""``gpuguard completion bash|zsh|fish``: the script that gives the shell gpuguard's verbs, flags and values.

The script comes from ``argcomplete`` (one library for the three shells; ``shtab`` writes bash and
zsh only): on TAB the shell runs ``gpuguard`` with ``_ARGCOMPLETE`` set, ``gpuguard.webhook.main``
builds the parser and ``argcomplete`` answers from it, so a new verb or flag completes with no
script to regenerate.  Install lines per shell: docs/cli.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpuguard.webhook.cli.common import guard
from gpuguard.webhook.exitcodes import ExitCode

SHELLS = ("bash", "zsh", "fish")
#: The executables completed: the command, and the kubectl plugin run by its own name.
EXECUTABLES = ("gpuguard", "kubectl-gpuguard")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "completion", description="Print the shell completion script for bash, zsh or fish. Load it with: "
        "source <(gpuguard completion bash) (bash, zsh); gpuguard completion fish | source (fish). docs/cli.md "
        "has the lines that keep it for every new shell.")
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=guard(run))


def script(shell: str) -> str:
    """The completion script for ``shell``."""
    from argcomplete.shell_integration import shellcode

    return shellcode(list(EXECUTABLES), shell=shell)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell))
    return ExitCode.OK
