"""``--fail-on``: one level per policy action (enforce -> deny, warn, audit) and ``never``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuguard.webhook.cli.audit.run import FAIL_ON
from gpuguard.webhook.main import main
from tests.support.paths import REPO

WARNED = str(REPO / "tests" / "fixtures" / "manifests" / "inference" / "vllm-deployment-spot.yaml")


def _config(tmp_path: Path, action: str) -> str:
    """The serving-grants fixture config with inference-on-spot (the finding WARNED has) at ``action``."""
    path = tmp_path / f"{action}.yaml"
    path.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\npolicies:\n"
                    "  workload-class: {allowEscalationTo: [inference, notebook]}\n"
                    f"  inference-on-spot: {{action: {action}}}\n")
    return str(path)


def test_every_policy_action_is_a_fail_on_level() -> None:
    from gpuguard.webhook.decision import ACTION_TO_VERDICT

    assert set(ACTION_TO_VERDICT.values()) | {"never"} == set(FAIL_ON)


@pytest.mark.parametrize(("fail_on", "expected"), [("deny", 0), ("warn", 0), ("audit", 1), ("never", 0)])
def test_an_audit_mode_finding_fails_only_fail_on_audit(capsys, tmp_path: Path, fail_on: str, expected: int) -> None:
    code = main(["audit", WARNED, "--format", "json", "--config", _config(tmp_path, "audit"), "--fail-on", fail_on])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert any(v["action"] == "audit" and v["policy"] == "inference-on-spot"
               for r in data["results"] for v in r.get("violations", [])), "the fixture lost its finding"
    assert (code, data["summary"]["exitCode"], data["summary"]["failOn"]) == (expected, expected, fail_on), err


def test_fail_on_audit_counts_warnings_and_denials_too(capsys, tmp_path: Path) -> None:
    assert main(["audit", WARNED, "-q", "--config", _config(tmp_path, "warn"), "--fail-on", "audit"]) == 1
    code = main(["audit", WARNED, "--format", "table", "--config", _config(tmp_path, "warn"), "--fail-on", "audit"])
    out, _ = capsys.readouterr()
    assert code == 1 and "deny, warn and audit findings present (--fail-on audit)" in out
