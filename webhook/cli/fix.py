"""``gpuguard fix FILE…``: write gpuguard's mutations into manifest files, before they are committed.

What an ML engineer runs before ``git commit``: every workload in the files gets the changes the
webhook would make at ``kubectl apply`` (tolerations, resources, priority class …), so the
cluster later has nothing to change and the repository says what really runs.  What is still
denied after that (a rule no mutation can satisfy) is printed, and the exit code is 1.

This module holds the flags, the report and the exit code; the editing is
``gpuguard.webhook.cli.fixer``, imported when the verb runs.  Files and stdin are read as every
gpuguard command reads manifests (``gpuguard.webhook.manifests.read_text``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.cli.common import (
    UsageError,
    add_common_flags,
    add_nodes_flag,
    error,
    guard,
    load_config_or_exit,
    manifest_paths,
    with_nodes_or_exit,
)
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpuguard.webhook.cli.fixer import FileResult


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fix", description="Apply the changes gpuguard's webhook would make at admission to every workload in the "
                    "files, keeping comments, key order and formatting of everything unchanged, then print what "
                    "would still be denied. Exit 0 when nothing is denied, 1 when something still is, 2 when a file "
                    "or an object cannot be read.")
    parser.add_argument("files", nargs="*", metavar="FILE", help="YAML or JSON manifest (multi-document); "
                        "- reads stdin and writes stdout; -f FILE is the same")
    add_common_flags(parser, manifests=True, quiet="print nothing but errors: no list of changes or denials (the "
                     "exit code says whether something is still denied); files are still written")
    parser.add_argument("--stdout", action="store_true", help="print the fixed files instead of writing them")
    parser.add_argument("--config", help="GpuguardConfig file (default: the shipped default)")
    parser.add_argument("--namespace", default="default", help="namespace for objects without one")
    add_nodes_flag(parser)
    parser.set_defaults(func=guard(run))


# ---------------------------------------------------------------- the command


def _report(result: FileResult, stream: Any, quiet: bool) -> tuple[bool, bool]:
    """Print what changed, what is still denied and what could not be read: (denied?, unreadable?).

    ``quiet``: only what could not be read, as an error on stderr.
    """
    denied = unreadable = False
    for obj in result.objects:
        if obj.error:
            unreadable = True
            if quiet:
                error(f"{obj.label}: gpuguard could not evaluate it: {obj.error}")
            else:
                print(f"ERROR   {obj.label}: gpuguard could not evaluate it: {obj.error}", file=stream)
        if obj.changed_by and not quiet:
            print(f"fixed   {obj.label}: {', '.join(obj.changed_by)}", file=stream)
            for change in obj.changes:  # a value the file had, overwritten: which, by what, from what
                print(f"changed {obj.label}: {change.text}", file=stream)
        for v in obj.denials:
            denied = True
            if not quiet:
                print(f"DENIED  {obj.label}: {v.text}", file=stream)
    return denied, unreadable


def run(args: argparse.Namespace) -> int:
    from gpuguard.webhook.cli.fixer import Fixer, FixError
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.manifests import ManifestError, read_text

    files = manifest_paths(args, "files")
    if not files:
        raise UsageError("nothing to fix: give manifest files (FILE, -f FILE, or - for stdin)")
    engine = Engine(load_config_or_exit(args.config))
    with_nodes_or_exit(engine, args.nodes)
    fixer = Fixer(engine, args.namespace)
    denied = failed = False
    for name in files:
        to_stdout = args.stdout or name == "-"
        try:
            source, text = read_text(name)
        except ManifestError as exc:
            error(f"{exc.source}: cannot read: {exc.error.message}")
            failed = True
            continue
        try:
            result = fixer.fix_text(text, source)
        except FixError as exc:
            error(str(exc))
            failed = True
            continue
        report_stream = sys.stderr if to_stdout else sys.stdout
        file_denied, unreadable = _report(result, report_stream, args.quiet)
        denied, failed = denied or file_denied, failed or unreadable
        if to_stdout:
            sys.stdout.write(result.text)
        elif result.changed:
            Path(name).write_text(result.text, encoding="utf-8")
    if failed:
        return ExitCode.USAGE
    return ExitCode.FINDINGS if denied else ExitCode.OK
