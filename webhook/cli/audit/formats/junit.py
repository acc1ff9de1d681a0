"""``--format junit``: one test case per workload x policy, for CI systems' test tabs.

Every CI system (GitHub, GitLab, Jenkins, Azure, Buildkite) renders JUnit XML, so a failed
audit reads like failed tests: one suite per source file, one case per (workload, policy).
A case fails when the policy has a finding at or above ``--fail-on`` (the same rule as the
exit code); findings below it and would-be changes go to the case's ``system-out``, so CI
shows them without failing.  Input and engine errors are ``<error>`` cases.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TextIO

from gpuguard.webhook.cli import junit
from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions
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


def build(report: AuditReport) -> ET.Element:
    """The ``<testsuites>`` tree: one suite per source, then one for errors of no source (exposed for tests)."""
    failing = FAILING[report.fail_on]
    suites: dict[str, junit.Suite] = {}
    for item in report.items:
        source = item.doc.source
        suite = suites.setdefault(source, junit.Suite(source))
        if item.is_input_error:
            suite.cases.append(junit.Case(f"{item.doc.location} :: input", source, error=junit.Outcome(
                item.error or "", item.error_type or "input", f"{item.doc.location}: {item.error}")))
        else:
            suite.cases.extend(_workload_cases(item, report, failing))
    for message in report.extra_errors:
        suites.setdefault("gpuguard", junit.Suite("gpuguard")).cases.append(
            junit.Case(message, "gpuguard", error=junit.Outcome(message, "error")))
    return junit.build("gpuguard audit", suites.values())


def render(report: AuditReport, out: TextIO, options: RenderOptions) -> None:
    junit.write(build(report), out)
