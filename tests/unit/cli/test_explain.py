"""``gpuguard policies`` and ``gpuguard explain``: the registry as users read it."""

from __future__ import annotations

import json

import pytest

from gpuguard.webhook.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_policies_lists_the_registry(capsys) -> None:
    from gpuguard.policies import REGISTRY

    code, out, _ = run(capsys, "policies")
    assert code == 0
    for pid, policy in REGISTRY.items():
        line = next(line for line in out.splitlines() if line.startswith(pid + " "))
        assert policy.phase in line and policy.default_action in line
    code, out, _ = run(capsys, "policies", "--format", "json")
    # the registry in engine order, then the engine's own check that every shell shares
    assert [p["id"] for p in json.loads(out)] == [*REGISTRY, "invalid-quantity", "not-fully-checked"]


def test_explain_knows_the_engines_invalid_quantity_check(capsys) -> None:
    code, out, _ = run(capsys, "explain", "invalid-quantity")
    assert code == 0 and "not numbers Kubernetes" in " ".join(out.split())
    assert "always on" in out and "Configure it" not in out


def test_explain_shows_checks_rationale_settings_and_example(capsys) -> None:
    code, out, _ = run(capsys, "explain", "job-ttl")
    assert code == 0
    for text in ("What it checks", "Why it matters", "ttlSecondsAfterFinished", "86400", "integer",
                 "Configure it", "kind: GpuguardConfig", "Passes"):
        assert text in out
    code, out, _ = run(capsys, "explain", "checkpoint-volume", "--format", "json")
    data = json.loads(out)
    assert data["phase"] == "validating" and any(s["name"] == "checkpointMountPaths" for s in data["settings"])


def test_explain_unknown_policy_suggests(capsys) -> None:
    code, out, err = run(capsys, "explain", "job-tll")
    assert code == 2 and out == ""
    assert err.startswith("gpuguard: error: unknown policy 'job-tll'") and "job-ttl" in err
