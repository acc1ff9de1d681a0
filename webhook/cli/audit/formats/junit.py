"""``--format junit``: one test case per workload x policy, for CI systems' test tabs.

Every CI system (GitHub, GitLab, Jenkins, Azure, Buildkite) renders JUnit XML, so a failed
audit reads like failed tests: one suite per source file, one case per (workload, policy).
A case fails when the policy has a finding at or above ``--fail-on`` (the same rule as the
exit code); findings below it and would-be changes go to the case's ``system-out``, so CI
shows them without failing.  Input and engine errors are ``<error>`` cases.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from typing import TextIO

from gpuguard.webhook.cli import junit
from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions, render
from gpuguard.webhook.cli.audit.formats.spool import Spool
from gpuguard.webhook.cli.audit.run import FAILING, AuditItem, AuditReport
from gpuguard.workloads.kinds import lookup


def _workload_cases(item: AuditItem, report: AuditReport, failing: frozenset[str]) -> list[junit.Case]:
    classname = item.label
    if item.error:
        return [junit.Case(f"{item.label} :: gpuguard", classname, error=junit.Outcome(
            item.error, item.error_type or "error", f"{item.doc.location}: {item.error}"))]
    if item.decision is not None and item.decision.skipped:
        if lookup(item.api_version, item.kind) is not None:  # a workload gpuguard was told to leave alone
            return [junit.Case(f"{item.label} :: gpuguard", classname, skipped=item.decision.skipped)]
        return []
    changes = mutation.describe_changes(item.patch)
    first_mutator = item.mutated_by[0] if item.mutated_by else None
    cases = []
    for pid in report.policy_ids():
        case = junit.Case(f"{item.label} :: {pid}", classname)
        found = [v for v in item.violations if v.policy == pid]
        failures = [v for v in found if v.verdict in failing]
        if failures:
            worst = "deny" if any(v.verdict == "deny" for v in failures) else failures[0].verdict
            case.failure = junit.Outcome(failures[0].text, worst, "\n".join(
                f"{_at(item, v.path)}: {v.verdict}: {v.text}" for v in failures))
        out = [f"{v.verdict}: {v.text}" for v in found if v not in failures]
        if pid == first_mutator:
            out.append(f"gpuguard would change this workload ({', '.join(item.mutated_by)}):")
            out.extend(f"  + {line}" for line in changes)
        elif pid in item.mutated_by:
            out.append(f"gpuguard would change this workload ({pid}); the changes are listed under "
                       f"{first_mutator}")
        case.output = "\n".join(out) or None
        cases.append(case)
    return cases


def _at(item: AuditItem, path: str) -> str:
    line = item.doc.line_of(path)
    return f"{item.doc.source}:{line}" if line else item.doc.source


_COUNTS = ("tests", "failures", "errors", "skipped")


def _start_tag(tag: str, attrs: dict[str, str]) -> str:
    """``<tag a="..">`` escaped as ElementTree escapes it."""
    empty = ET.tostring(ET.Element(tag, attrs), encoding="unicode")
    return empty[: -len(" />")] + ">"


def _new_counts() -> dict[str, float]:
    return {**dict.fromkeys(_COUNTS, 0), "time": 0.0}


class Writer:
    """Cases are serialized as each item is decided.  A source's items come one after another, so its
    ``<testsuite>`` (counts first) is written to a spool as soon as the next source starts, and only the
    ``<testsuites>`` totals wait for the end: memory holds one suite's counts, however many files there are.
    The output is what ``gpuguard.webhook.cli.junit.write`` writes for the same suites; a source whose
    items do not come together (a path given twice) gets one suite per run of items."""

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions) -> None:
        self.report, self.out = report, out
        self.failing = FAILING[report.fail_on]
        self.suites = Spool()  # finished <testsuite> elements, in order (key None)
        self.cases = Spool()  # the current suite's cases (key None), until its counts are known
        self.current: str | None = None
        self.counts = _new_counts()
        self.totals = _new_counts()
        self.any_suite = False

    def _end_suite(self) -> None:
        if self.current is None:
            return
        counts = self.counts
        attrs = {"name": junit.clean(self.current), **{k: str(int(counts[k])) for k in _COUNTS},
                 "time": f"{counts['time']:.3f}"}
        if None in self.cases:
            self.suites.write(None, "  " + _start_tag("testsuite", attrs) + "\n")
            for chunk in self.cases.chunks(None):
                self.suites.write(None, chunk)
            self.suites.write(None, "  </testsuite>\n")
        else:
            self.suites.write(None, "  " + ET.tostring(ET.Element("testsuite", attrs), encoding="unicode") + "\n")
        for key in self.totals:
            self.totals[key] += counts[key]
        self.cases.clear()
        self.current, self.counts, self.any_suite = None, _new_counts(), True

    def _cases(self, suite: str, cases: list[junit.Case]) -> None:
        if suite != self.current:
            self._end_suite()
            self.current = suite
        counts = self.counts
        for case in cases:
            counts["tests"] += 1
            counts["failures"] += case.failure is not None
            counts["errors"] += case.error is not None
            counts["skipped"] += case.skipped is not None
            counts["time"] += case.seconds
            element = junit.case_element(case)
            ET.indent(element, level=2)
            self.cases.write(None, "    " + ET.tostring(element, encoding="unicode") + "\n")

    def add(self, item: AuditItem) -> None:
        source = item.doc.source
        if item.is_input_error:
            self._cases(source, [junit.Case(f"{item.doc.location} :: input", source, error=junit.Outcome(
                item.error or "", item.error_type or "input", f"{item.doc.location}: {item.error}"))])
        else:
            self._cases(source, _workload_cases(item, self.report, self.failing))

    def finish(self) -> None:
        for message in self.report.extra_errors:
            self._cases("gpuguard", [junit.Case(message, "gpuguard", error=junit.Outcome(message, "error"))])
        self._end_suite()
        totals = self.totals
        root = {"name": junit.clean("gpuguard audit"), **{k: str(int(totals[k])) for k in _COUNTS},
                "time": f"{totals['time']:.3f}"}
        self.out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
        if not self.any_suite:
            self.out.write(ET.tostring(ET.Element("testsuites", root), encoding="unicode") + "\n")
            return
        self.out.write(_start_tag("testsuites", root) + "\n")
        self.suites.copy(None, self.out)
        self.out.write("</testsuites>\n")

    def close(self) -> None:
        self.suites.close()
        self.cases.close()


def build(report: AuditReport) -> ET.Element:
    """The ``<testsuites>`` tree of ``report``'s items (for tests: the text ``render`` writes, parsed)."""
    out = io.StringIO()
    render(report, "junit", out)
    return ET.fromstring(out.getvalue().split("\n", 1)[1])
