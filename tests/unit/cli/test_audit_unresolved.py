"""A workload naming what the audited files lack (a TrainJob's runtime): "not fully checked", a finding.

The webhook refuses such an object until its runtime exists; a CI audit of manifests that leave the
cluster's runtimes out reports a ``not-fully-checked`` deny finding that ``--fail-on`` weighs like
any other (exit 0 under ``--fail-on never``), not an engine error (exit 2).
"""

from __future__ import annotations

import json

import yaml

from gpuguard.webhook.decision import NOT_FULLY_CHECKED, Decision, unresolved_as_finding
from tests.support.builders import make, pvc_pod_spec, runtime_for
from tests.support.server import run_cli


def _write(tmp_path, *objects: dict) -> str:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


def test_a_trainjob_without_its_runtime_is_a_finding_that_fail_on_weighs(tmp_path) -> None:
    path = _write(tmp_path, make("TrainJob", pvc_pod_spec(gpus=8), replicas=1))
    result = run_cli("audit", path, "--format", "json")
    data = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    assert data["summary"]["engineErrors"] == 0 and data["summary"]["denied"] == 1
    (entry,) = data["results"]
    (finding,) = [v for v in entry["violations"] if v["policy"] == NOT_FULLY_CHECKED]
    assert "not fully checked" in finding["message"]
    assert "ClusterTrainingRuntime 'torch' not found" in finding["message"]
    assert "--lookup-cluster" in finding["fix"]
    never = run_cli("audit", path, "--format", "json", "--fail-on", "never")
    assert never.returncode == 0, never.stderr
    table = run_cli("audit", path)
    assert table.returncode == 1 and NOT_FULLY_CHECKED in table.stdout


def test_with_its_runtime_in_the_files_it_is_judged_in_full(tmp_path) -> None:
    path = _write(tmp_path, make("TrainJob", pvc_pod_spec(gpus=8), replicas=1),
                  runtime_for("TrainJob", pvc_pod_spec(gpus=8)))
    data = json.loads(run_cli("audit", path, "--format", "json", "--fail-on", "never").stdout)
    trainjob = next(r for r in data["results"] if r["kind"] == "TrainJob")
    assert not any(v["policy"] == NOT_FULLY_CHECKED for v in trainjob["violations"])


def test_evaluate_and_sarif_name_it_too(tmp_path) -> None:
    path = _write(tmp_path, make("TrainJob", pvc_pod_spec(gpus=8), replicas=1))
    evaluated = run_cli("evaluate", path, "--fail-on-deny")
    assert evaluated.returncode == 1 and f"[{NOT_FULLY_CHECKED}]" in evaluated.stdout
    assert run_cli("evaluate", path).returncode == 0  # evaluate reports; it fails only when asked
    sarif = json.loads(run_cli("audit", path, "--format", "sarif").stdout)
    rules = {r["id"] for r in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert NOT_FULLY_CHECKED in rules


def test_lookup_cluster_needs_paths_and_takes_kubeconfig() -> None:
    alone = run_cli("audit", "--lookup-cluster")
    assert alone.returncode == 2 and "give manifest paths" in alone.stderr
    context = run_cli("audit", "x.yaml", "--context", "prod")
    assert context.returncode == 2 and "--context needs --cluster or --lookup-cluster" in context.stderr


def test_only_unresolved_errors_become_findings() -> None:
    """A real engine error stays an error (exit 2): only what the input lacks is the input's business."""
    crashed = Decision(allowed=False, api_version="v1", kind="Pod", namespace="ml", name="p", original={},
                       mutated={}, error="its policies could not be evaluated (RecursionError)")
    assert unresolved_as_finding(crashed) is crashed
    missing = Decision(allowed=False, api_version="v1", kind="Pod", namespace="ml", name="p", original={},
                       mutated={}, error="spec.resourceClaims[0]: claim template gpus not found",
                       unresolved="spec.resourceClaims[0]: claim template gpus not found")
    found = unresolved_as_finding(missing)
    assert found.error is None and not found.allowed and [v.policy for v in found.denials] == [NOT_FULLY_CHECKED]
