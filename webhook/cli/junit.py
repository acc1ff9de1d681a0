"""JUnit XML, written one way for ``gpuguard test --junit`` and ``gpuguard audit --format junit``.

Every CI system renders JUnit XML as a test tab, so both verbs describe their results as
suites of cases (``Suite``, ``Case``) and this module turns them into one document: the
counts on ``<testsuites>`` and each ``<testsuite>`` are computed here, never by the callers.
The text comes from users' manifests, so it may hold characters XML 1.0 cannot carry (a
``\\x01`` in a double-quoted YAML name); they are written as visible ``\\xNN`` escapes, so
the report always parses.  Stdlib only.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

# Everything outside XML 1.0's Char production: C0 controls but tab, LF and CR; surrogates; U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_COUNTS = ("tests", "failures", "errors", "skipped")


@dataclass(frozen=True)
class Outcome:
    """A failure or an error: a one-line ``message``, a ``type`` CI may group by, the full ``text``."""

    message: str
    type: str
    text: str | None = None


@dataclass
class Case:
    """One ``<testcase>``: passed unless it holds a failure, an error or a skip reason."""

    name: str
    classname: str
    seconds: float = 0.0
    failure: Outcome | None = None
    error: Outcome | None = None
    skipped: str | None = None
    output: str | None = None  # <system-out>: shown by CI without failing the case


@dataclass
class Suite:
    """One ``<testsuite>``."""

    name: str
    cases: list[Case] = field(default_factory=list)


def clean(text: str) -> str:
    """``text`` with every character XML 1.0 forbids replaced by a visible escape (``\\x01``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def _counts(cases: list[Case]) -> dict[str, int]:
    return {"tests": len(cases),
            "failures": sum(1 for c in cases if c.failure is not None),
            "errors": sum(1 for c in cases if c.error is not None),
            "skipped": sum(1 for c in cases if c.skipped is not None)}


def _outcome(parent: ET.Element, tag: str, outcome: Outcome) -> None:
    element = ET.SubElement(parent, tag, message=clean(outcome.message), type=clean(outcome.type))
    if outcome.text is not None:
        element.text = clean(outcome.text)


def _case(parent: ET.Element, case: Case) -> None:
    parent.append(case_element(case))


def case_element(case: Case) -> ET.Element:
    """One ``<testcase>`` element (a writer that streams cases serializes them one by one)."""
    element = ET.Element("testcase", name=clean(case.name), classname=clean(case.classname),
                         time=f"{case.seconds:.3f}")
    if case.failure is not None:
        _outcome(element, "failure", case.failure)
    if case.error is not None:
        _outcome(element, "error", case.error)
    if case.skipped is not None:
        ET.SubElement(element, "skipped", message=clean(case.skipped))
    if case.output:
        ET.SubElement(element, "system-out").text = clean(case.output)
    return element


def build(name: str, suites: Iterable[Suite]) -> ET.Element:
    """The ``<testsuites>`` tree, with the counts and times of every suite and of the whole."""
    root = ET.Element("testsuites", name=clean(name))
    totals = dict.fromkeys(_COUNTS, 0)
    total_seconds = 0.0
    for suite in suites:
        counts = _counts(suite.cases)
        seconds = sum(c.seconds for c in suite.cases)
        element = ET.SubElement(root, "testsuite", name=clean(suite.name),
                                **{k: str(v) for k, v in counts.items()}, time=f"{seconds:.3f}")
        for case in suite.cases:
            _case(element, case)
        for key in _COUNTS:
            totals[key] += counts[key]
        total_seconds += seconds
    for key in _COUNTS:
        root.set(key, str(totals[key]))
    root.set("time", f"{total_seconds:.3f}")
    return root


def write(root: ET.Element, out: TextIO) -> None:
    """The document, indented, with its XML declaration and a final newline."""
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
