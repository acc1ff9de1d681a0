"""Every audit format stays well-formed whatever control characters a manifest's names hold.

JUnit has its own test (tests/unit/cli/test_junit.py); these cover the machine-read formats a
CI step parses (JSON, SARIF, PolicyReport YAML) and the HTML page a browser opens.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest
import yaml

from gpuguard.webhook.main import main
from tests.support.hostile import CONTROL_CHARS as ODD
from tests.support.hostile import gpu_job_yaml as _job


def holds_the_name(value: object) -> bool:
    """Whether some string in the parsed report holds the manifest's name exactly."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and f"bad{ODD}" in item:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


@pytest.fixture
def odd_manifest(tmp_path):
    path = tmp_path / "odd.yaml"
    path.write_text(_job(f"bad{ODD}<script>x</script>"))
    return path


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_json_formats_parse(fmt, odd_manifest, tmp_path):
    out = tmp_path / f"report.{fmt}"
    assert main(["audit", str(odd_manifest), "--format", fmt, "--output-file", str(out)]) in (0, 1)
    raw = out.read_bytes()
    raw.decode("utf-8")  # strict: no lone surrogate written
    assert holds_the_name(json.loads(raw))


def test_policyreport_parses(odd_manifest, tmp_path):
    out = tmp_path / "report.yaml"
    assert main(["audit", str(odd_manifest), "--format", "policyreport", "--output-file", str(out)]) in (0, 1)
    docs = [d for d in yaml.safe_load_all(out.read_bytes().decode("utf-8")) if d]
    assert holds_the_name(docs)


def test_html_holds_no_control_characters_and_no_markup_from_the_manifest(odd_manifest, tmp_path):
    out = tmp_path / "report.html"
    assert main(["audit", str(odd_manifest), "--format", "html", "--output-file", str(out)]) in (0, 1)
    page = out.read_bytes().decode("utf-8")
    bad = sorted({hex(ord(c)) for c in page if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F})
    assert bad == []
    assert "<script>" not in page and "bad\\x00\\x01" in page
    HTMLParser().feed(page)
