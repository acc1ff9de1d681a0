"""One JUnit writer for ``gpuguard test --junit`` and ``gpuguard audit --format junit``: counts, and XML
that parses whatever text the manifests and fixtures hold."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import yaml

from gpuguard.webhook.cli import junit
from gpuguard.webhook.main import main

# Every C0 control character XML 1.0 forbids, plus a lone surrogate and U+FFFF.
CONTROL = "".join(chr(c) for c in range(0x20) if chr(c) not in "\t\n\r") + "\ud800\uffff"


def _written(root: ET.Element) -> str:
    out = io.StringIO()
    junit.write(root, out)
    return out.getvalue()


def test_counts_and_times_are_computed_by_the_writer() -> None:
    suites = [junit.Suite("a", [junit.Case("ok", "a", 0.5),
                                junit.Case("bad", "a", 0.25, failure=junit.Outcome("no", "mismatch", "no\nreally")),
                                junit.Case("broken", "a", error=junit.Outcome("x", "case-error"))]),
              junit.Suite("b", [junit.Case("left alone", "b", skipped="exempt", output="why")])]
    root = ET.fromstring(_written(junit.build("gpuguard test", suites)))
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped", "time")} == {
        "tests": "4", "failures": "1", "errors": "1", "skipped": "1", "time": "0.750"}
    a, b = root.findall("testsuite")
    assert (a.get("tests"), a.get("failures"), b.get("skipped")) == ("3", "1", "1")
    assert a.find("testcase[@name='bad']/failure").text == "no\nreally"
    assert b.find("testcase/system-out").text == "why"


def test_control_characters_become_visible_escapes_and_the_xml_parses() -> None:
    text = f"name{CONTROL}end"
    case = junit.Case(text, text, failure=junit.Outcome(text, text, text), output=text)
    written = _written(junit.build(text, [junit.Suite(text, [case])]))
    written.encode("utf-8")  # no lone surrogate left
    root = ET.fromstring(written)
    failure = root.find("testsuite/testcase/failure")
    assert failure.get("message").startswith("name\\x00\\x01") and failure.get("message").endswith("\\ud800\\uffffend")
    assert junit.clean("tab\tnew\nline\rok") == "tab\tnew\nline\rok"  # the three that XML allows stay


def _job(name: str) -> str:
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"},
                           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                               {"name": "t", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}},
                          allow_unicode=False)


def test_audit_junit_of_a_manifest_with_control_characters_parses(tmp_path, capsys) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(_job("bad\x01name\x1b[31m"))
    out = tmp_path / "report.xml"
    main(["audit", str(path), "--format", "junit", "--output-file", str(out)])
    root = ET.parse(out).getroot()
    names = [case.get("name") for case in root.iter("testcase")]
    assert names and all("bad\\x01name\\x1b[31m" in name for name in names)


def test_gpuguard_test_junit_with_control_characters_parses(tmp_path, capsys) -> None:
    case = tmp_path / "suite" / "odd\x7fcase"
    case.mkdir(parents=True)
    (case / "input.yaml").write_text(_job("x"))
    (case / "expect.yaml").write_text(yaml.safe_dump({"description": "says \x07 and \x0c", "allowed": False}))
    out = tmp_path / "junit.xml"
    main(["test", str(tmp_path / "suite"), "--junit", str(out)])
    [testcase] = ET.parse(out).getroot().iter("testcase")
    assert testcase.find("system-out").text == "says \\x07 and \\x0c"
