"""``gpuguard test PATH…``: run policy suites (``docs/policy-fixtures.md``) and say what differs.

In the style of ``kyverno test`` and ``gator verify``: each case folder holds a manifest and
the decision an admin expects (allowed or denied, which policies fire at which action, the
mutated object).  The cases are run by ``gpuguard.webhook.suite`` (the same library the project's own
``tests/policies/`` use); this module only shows the results: a table, each mismatch as a
sentence, optional JUnit XML for CI, and the exit code (0 all pass, 1 any case fails, 2 a
path holds no case or a case file cannot be read at all).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.cli import junit
from gpuguard.webhook.cli.common import add_common_flags, error, guard, print_whole, whole_line_console
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from rich.table import Table

    from gpuguard.webhook import suite


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "test", description="Run every case under PATH (a folder holding input.yaml and expect.yaml; see "
                    "docs/policy-fixtures.md) through gpuguard and compare the decision, findings and mutated "
                    "object with what the case expects. Exit 0 when all pass, 1 when any case fails, 2 when a "
                    "path holds no case.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="suite folder, case folder or a case's input.yaml")
    add_common_flags(parser, ("table", "junit"), file_flag="--junit",
                     quiet="list failing cases and their mismatches only; nothing when every case passes")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE (- for stdout: the table "
                        "goes to stderr, as with -o junit)")
    parser.add_argument("--nodes", metavar="FILE", help="Node and Karpenter NodePool objects for cases without "
                        "their own nodes.yaml")
    parser.set_defaults(func=guard(run))


def _status(result: suite.CaseResult) -> str:
    if result.error:
        return "ERROR"
    return "PASS" if result.passed else "FAIL"


_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold magenta"}


def _table(results: list[suite.CaseResult], quiet: bool) -> Table:
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("result")
    table.add_column("case", overflow="fold")
    table.add_column("description", overflow="fold")
    for result in results:
        status = _status(result)
        if quiet and status == "PASS":
            continue
        table.add_row(f"[{_STYLE[status]}]{status}[/]", result.case.name, result.description)
    return table


def junit_suite(results: list[suite.CaseResult], name: str, seconds: dict[Path, float]) -> junit.Suite:
    """One JUnit suite, one case per fixture case (failure: mismatches; error: a broken case)."""
    cases = []
    for result in results:
        case = junit.Case(result.case.name, result.case.suite_root.name, seconds.get(result.case.path, 0.0),
                          output=result.description or None)
        if result.error:
            case.error = junit.Outcome(result.error, "case-error", result.error)
        elif result.mismatches:
            case.failure = junit.Outcome(result.mismatches[0], "mismatch", "\n".join(result.mismatches))
        cases.append(case)
    return junit.Suite(name, cases)


def _write_junit(target: str, root: ET.Element) -> None:
    if target == "-":
        junit.write(root, sys.stdout)
        return
    with open(target, "w", encoding="utf-8") as out:
        junit.write(root, out)


def _show(results: list[suite.CaseResult], failed: list[suite.CaseResult], stream: Any, quiet: bool) -> None:
    """The table, each failing case's mismatches and the count; off a terminal every line whole."""
    console = whole_line_console(stream)
    print_whole(console, _table(results, quiet), stream=stream)
    for result in failed:
        print_whole(console, f"\n[bold]{_status(result)} {result.case.name}[/] ({result.case.path})", markup=True,
                    stream=stream)
        for line in ([result.error] if result.error else result.mismatches):
            print_whole(console, f"  - {line}", markup=False, stream=stream)
    passed = len(results) - len(failed)
    print_whole(console, f"\n{passed}/{len(results)} cases passed" + (f", {len(failed)} failed" if failed else ""),
                stream=stream)


def run(args: argparse.Namespace) -> int:
    from gpuguard.webhook import suite

    if args.format == "junit":
        if args.junit not in (None, "-"):
            error("-o junit writes JUnit XML to stdout; --junit FILE writes it to a file: give one of them")
            return ExitCode.USAGE
        args.junit = "-"

    try:
        cases = suite.discover(args.paths)
    except suite.SuiteError as exc:
        error(str(exc))
        return ExitCode.USAGE
    nodes = None
    if args.nodes:
        from gpuguard.webhook.manifests import ManifestError

        try:
            nodes = suite.read_nodes(args.nodes)
        except ManifestError as exc:
            error(f"--nodes: {exc}")
            return ExitCode.USAGE
    results: list[suite.CaseResult] = []
    seconds: dict[Path, float] = {}
    for case in cases:
        start = time.perf_counter()
        results.append(suite.run_case(case, nodes))
        seconds[case.path] = time.perf_counter() - start
    failed = [r for r in results if not r.passed]
    if failed or not args.quiet:
        _show(results, failed, sys.stdout if args.junit != "-" else sys.stderr, args.quiet)
    if args.junit:
        _write_junit(args.junit, junit.build("gpuguard test", [junit_suite(results, " ".join(args.paths), seconds)]))
    unreadable = [r for r in results if r.unreadable]
    for result in unreadable:  # bad input, not a finding about gpuguard: as every verb, exit 2
        error(f"{result.case.path}: {result.error}")
    if unreadable:
        return ExitCode.USAGE
    return ExitCode.FINDINGS if failed else ExitCode.OK
