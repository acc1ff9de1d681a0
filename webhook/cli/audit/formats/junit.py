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

from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport
from gpuguard.workloads.kinds import lookup

_FAILING = {"deny": {"deny"}, "warn": {"deny", "warn"}, "never": set()}


def _case(suite: ET.Element, name: str, classname: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", name=name, classname=classname, time="0")


def _workload_cases(suite: ET.Element, item: AuditItem, report: AuditReport, failing: set[str]) -> None:
    classname = item.label
    if item.error:
        case = _case(suite, f"{item.label} :: gpuguard", classname)
        ET.SubElement(case, "error", message=item.error, type=item.error_type or "error").text = \
            f"{item.doc.location}: {item.error}"
        return
    if item.decision is not None and item.decision.skipped:
        if lookup(item.api_version, item.kind) is not None:  # a workload gpuguard was told to leave alone
            case = _case(suite, f"{item.label} :: gpuguard", classname)
            ET.SubElement(case, "skipped", message=item.decision.skipped)
        return
    changes = mutation.describe_changes(item.patch)
    first_mutator = item.mutated_by[0] if item.mutated_by else None
    for pid in report.policy_ids():
        case = _case(suite, f"{item.label} :: {pid}", classname)
        found = [v for v in item.violations if v.policy == pid]
        failures = [v for v in found if v.verdict in failing]
        if failures:
            worst = "deny" if any(v.verdict == "deny" for v in failures) else failures[0].verdict
            ET.SubElement(case, "failure", message=failures[0].text, type=worst).text = "\n".join(
                f"{_at(item, v.path)}: {v.verdict}: {v.text}" for v in failures)
        out = [f"{v.verdict}: {v.text}" for v in found if v not in failures]
        if pid == first_mutator:
            out.append(f"gpuguard would change this workload ({', '.join(item.mutated_by)}):")
            out.extend(f"  + {line}" for line in changes)
        elif pid in item.mutated_by:
            out.append(f"gpuguard would change this workload ({pid}); the changes are listed under "
                       f"{first_mutator}")
        if out:
            ET.SubElement(case, "system-out").text = "\n".join(out)


def _at(item: AuditItem, path: str) -> str:
    line = item.doc.line_of(path)
    return f"{item.doc.source}:{line}" if line else item.doc.source


def _count(suite: ET.Element) -> dict[str, int]:
    cases = suite.findall("testcase")
    return {"tests": len(cases),
            "failures": sum(1 for c in cases if c.find("failure") is not None),
            "errors": sum(1 for c in cases if c.find("error") is not None),
            "skipped": sum(1 for c in cases if c.find("skipped") is not None)}


def build(report: AuditReport) -> ET.Element:
    """The ``<testsuites>`` tree (exposed for tests)."""
    failing = _FAILING[report.fail_on]
    root = ET.Element("testsuites", name="gpuguard audit")
    suites: dict[str, ET.Element] = {}
    for item in report.items:
        source = item.doc.source
        if source not in suites:
            suites[source] = ET.SubElement(root, "testsuite", name=source)
        suite = suites[source]
        if item.is_input_error:
            case = _case(suite, f"{item.doc.location} :: input", source)
            ET.SubElement(case, "error", message=item.error or "", type=item.error_type or "input").text = \
                f"{item.doc.location}: {item.error}"
        else:
            _workload_cases(suite, item, report, failing)
    for message in report.extra_errors:
        suite = suites.setdefault("gpuguard", ET.SubElement(root, "testsuite", name="gpuguard"))
        ET.SubElement(_case(suite, message, "gpuguard"), "error", message=message, type="error")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in root.findall("testsuite"):
        counts = _count(suite)
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", "0")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", "0")
    return root


def render(report: AuditReport, out: TextIO, options: RenderOptions) -> None:
    root = build(report)
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
