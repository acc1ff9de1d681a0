"""A custom rule's finding has the same path / message / fix in every shell: ``evaluate``, and every
``audit`` format (and the webhook, in tests/e2e/test_custom_policies_e2e.py)."""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from gpuguard.webhook.cli.audit.formats import FORMATS
from gpuguard.webhook.main import main
from tests.support.paths import REPO

ROOT = REPO
CONFIG = ROOT / "examples" / "policy-suite" / "config.yaml"
RAYJOB = ROOT / "examples" / "policy-suite" / "custom-rules" / "rayjob-foreign-image" / "input.yaml"
PATH = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers"
MESSAGE = "images of GPU pods must come from registry.corp"
FIX = "push the image to registry.corp/<team>/ and use that reference"
TEXT = f"[gpu-registry] {PATH} (gpu-workers): {MESSAGE}; {FIX}."


def run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_evaluate_json_has_the_violation_shape(capsys):
    code, out = run(capsys, "evaluate", "--config", str(CONFIG), "--format", "json", str(RAYJOB))
    [entry] = json.loads(out)
    assert code == 0 and not entry["allowed"]
    assert {"policy": "gpu-registry", "action": "deny", "message": TEXT, "path": PATH, "fix": FIX} in \
        entry["violations"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_audit_format_shows_the_custom_finding(capsys, tmp_path, fmt):
    out_file = tmp_path / f"report.{fmt}"
    code = main(["audit", "--config", str(CONFIG), "--format", fmt, "--output-file", str(out_file), str(RAYJOB)])
    text = out_file.read_text()
    assert code == 1  # denied
    if fmt == "json":
        [result] = json.loads(text)["results"]
        assert {"policy": "gpu-registry", "action": "deny", "message": TEXT, "path": PATH, "fix": FIX} in \
            result["violations"]
        assert json.loads(text)["summary"]["byPolicy"]["gpu-registry"]["deny"] == 1
    elif fmt == "sarif":
        run_ = json.loads(text)["runs"][0]
        rules = {r["id"]: r for r in run_["tool"]["driver"]["rules"]}
        assert rules["gpu-registry"]["shortDescription"]["text"] == "Images of GPU pods come from the team registry"
        [result] = [r for r in run_["results"] if r["ruleId"] == "gpu-registry"]
        assert result["level"] == "error" and f"{MESSAGE}; fix: {FIX}" in result["message"]["text"]
    elif fmt == "junit":
        failures = ET.fromstring(text).findall(".//testcase/failure")
        assert any(TEXT in (f.get("message", "") + (f.text or "")) for f in failures)
    elif fmt in ("policyreport", "openreports"):
        [result] = [r for r in yaml.safe_load(text)["results"] if r["policy"] == "gpu-registry"]
        assert result["message"] == TEXT and result["result"] == "fail"
    elif fmt == "html":
        assert html.escape(MESSAGE) in text and html.escape(FIX) in text and "gpu-registry" in text
    else:  # table
        assert MESSAGE in text and FIX in text and "gpu-registry" in text


def test_policies_and_explain_list_custom_rules_of_a_config(capsys):
    code, out = run(capsys, "policies", "--config", str(CONFIG), "--format", "json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert code == 0 and rows["gpu-registry"]["title"] == "Images of GPU pods come from the team registry"
    assert rows["gpu-registry"]["phase"] == "validating" and "job-ttl" in rows
    code, out = run(capsys, "explain", "gpu-registry", "--config", str(CONFIG), "--format", "json")
    assert code == 0 and "podSpec.containers.all" in json.loads(out)["rationale"]
    assert main(["explain", "gpu-registry"]) == 2  # not a built-in policy without the config
    assert "unknown policy 'gpu-registry'" in capsys.readouterr().err
