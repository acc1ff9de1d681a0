"""``gpuguard test PATH…``: run policy suites (``docs/policy-fixtures.md``) and say what differs.

In the style of ``kyverno test`` and ``gator verify``: each case folder holds a manifest and
the decision an admin expects (allowed or denied, which policies fire at which action, the
mutated object).  The cases are run by ``gpuguard.webhook.suite`` (the same library the project's own
``tests/policies/`` use); this module only shows the results: a table, each mismatch as a
sentence, optional JUnit XML for CI, and the exit code (0 all pass, 1 any case fails, 2 a
path holds no case).
"""

from __future__ import annotations

import argparse
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuguard.webhook import suite
from gpuguard.webhook.cli.common import EXIT_USAGE, error, guard

EXIT_PASS, EXIT_FAIL = 0, 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "test", help="run policy test suites (cases of manifest + expected decision)",
        description="Run every case under PATH (a folder holding input.yaml and expect.yaml; see "
                    "docs/policy-fixtures.md) through gpuguard and compare the decision, findings and mutated "
                    "object with what the case expects. Exit 0 when all pass, 1 when any case fails, 2 when a "
                    "path holds no case.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="suite folder, case folder or a case's input.yaml")
    parser.add_argument("--junit", metavar="FILE", help="also write JUnit XML to FILE (- for stdout)")
    parser.add_argument("-q", "--quiet", action="store_true", help="list failing cases only")
    parser.set_defaults(func=guard(run))


def _status(result: suite.CaseResult) -> str:
    if result.error:
        return "ERROR"
    return "PASS" if result.passed else "FAIL"


_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold magenta"}


def _table(results: list[suite.CaseResult], quiet: bool) -> Table:
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


def junit(results: list[suite.CaseResult], name: str, seconds: dict[Path, float]) -> ET.Element:
    """The JUnit XML tree: one testsuite, one testcase per case (failure: mismatches; error: broken case)."""
    failures = sum(1 for r in results if r.mismatches and not r.error)
    errors = sum(1 for r in results if r.error)
    root = ET.Element("testsuites", name="gpuguard test", tests=str(len(results)), failures=str(failures),
                      errors=str(errors))
    ts = ET.SubElement(root, "testsuite", name=name, tests=str(len(results)), failures=str(failures),
                       errors=str(errors), skipped="0")
    for result in results:
        case = ET.SubElement(ts, "testcase", name=result.case.name, classname=result.case.suite_root.name,
                             time=f"{seconds.get(result.case.path, 0.0):.4f}")
        if result.error:
            ET.SubElement(case, "error", message=result.error, type="case-error").text = result.error
        elif result.mismatches:
            ET.SubElement(case, "failure", message=result.mismatches[0], type="mismatch").text = \
                "\n".join(result.mismatches)
        if result.description:
            ET.SubElement(case, "system-out").text = result.description
    return root


def run(args: argparse.Namespace) -> int:
    try:
        cases = suite.discover(args.paths)
    except suite.SuiteError as exc:
        error(str(exc))
        return EXIT_USAGE
    results: list[suite.CaseResult] = []
    seconds: dict[Path, float] = {}
    for case in cases:
        start = time.perf_counter()
        results.append(suite.run_case(case))
        seconds[case.path] = time.perf_counter() - start
    stream = sys.stdout if args.junit != "-" else sys.stderr
    probe = Console(file=stream)
    # Not a terminal (CI logs, pipes): wide enough that descriptions do not wrap into columns.
    console = Console(file=stream, width=probe.width if probe.is_terminal else 200, highlight=False)
    console.print(_table(results, args.quiet))
    failed = [r for r in results if not r.passed]
    for result in failed:
        console.print(f"\n[bold]{_status(result)} {result.case.name}[/] ({result.case.path})", markup=True)
        for line in ([result.error] if result.error else result.mismatches):
            console.print(f"  - {line}", markup=False)
    passed = len(results) - len(failed)
    console.print(f"\n{passed}/{len(results)} cases passed" + (f", {len(failed)} failed" if failed else ""))
    if args.junit:
        tree = ET.ElementTree(junit(results, " ".join(args.paths), seconds))
        ET.indent(tree)
        if args.junit == "-":
            tree.write(sys.stdout, encoding="unicode", xml_declaration=True)
            sys.stdout.write("\n")
        else:
            tree.write(args.junit, encoding="utf-8", xml_declaration=True)
    return EXIT_FAIL if failed else EXIT_PASS
