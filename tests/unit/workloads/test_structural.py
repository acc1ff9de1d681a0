"""Open world: pod specs found by structure in kinds nobody described, in the layouts operators use, and
unknown kinds carrying accelerators reported in every shell instead of passed in silence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.main import main
from gpuguard.workloads.structural import find_pod_specs
from tests.support.engines import engine_with


def _containers(gpus: int, image: str = "registry.example/ml/worker:3") -> list[dict]:
    return [{"name": "main", "image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]


# Five layouts of invented kinds: (object, GPUs it asks for, pod specs found, how many were counted).
LAYOUTS: dict[str, tuple[dict, int, int]] = {
    "a list of roles, each with a count and a template": ({
        "apiVersion": "rl.example.dev/v1", "kind": "PolicyTrainer", "metadata": {"name": "grpo"},
        "spec": {"roles": [
            {"name": "actor", "replicas": 4, "template": {"metadata": {}, "spec": {"containers": _containers(8)}}},
            {"name": "rollout", "replicas": 2, "template": {"spec": {"containers": _containers(4)}}},
            {"name": "reward", "template": {"spec": {"containers": _containers(0)}}}]}}, 40, 3),
    "a worker template nested in a job spec": ({
        "apiVersion": "train.example.org/v2", "kind": "ElasticRun", "metadata": {"name": "e"},
        "spec": {"job": {"elastic": {"maxNodes": 8}, "worker": {"numWorkers": 6, "template": {
            "spec": {"containers": _containers(8)}}}}}}, 48, 1),
    "templates inside trial specs": ({
        "apiVersion": "tune.example.io/v1alpha2", "kind": "HyperSweep", "metadata": {"name": "s"},
        "spec": {"maxParallelTrials": 3, "trialTemplate": {"trialSpec": {"replicas": 2, "template": {
            "spec": {"containers": _containers(2)}}}}}}, 4, 1),
    "a bare pod spec under an unusual key": ({
        "apiVersion": "serve.example.net/v1", "kind": "ModelEndpoint", "metadata": {"name": "m"},
        "spec": {"runtime": {"engineSpec": {"containers": _containers(1, "registry.example/engine:2")}}}}, 1, 1),
    "templates in a map of named replica specs": ({
        "apiVersion": "dist.example.com/v1", "kind": "ParameterServerJob", "metadata": {"name": "p"},
        "spec": {"replicaSpecs": {
            "chief": {"replicas": 1, "template": {"spec": {"containers": _containers(1)}}},
            "worker": {"replicas": 5, "template": {"spec": {"containers": _containers(2)}}},
            "ps": {"replicas": 2, "template": {"spec": {"containers": _containers(0)}}}}}}, 11, 3),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_pod_specs_are_found_wherever_they_sit(name: str) -> None:
    obj, _, specs = LAYOUTS[name]
    found = find_pod_specs(obj)
    assert len(found) == specs
    for spec in found:
        value: object = obj
        for key in spec.spec_path:
            value = value[key]  # type: ignore[index]
        assert isinstance(value, dict) and "containers" in value


def test_a_template_without_a_count_says_so() -> None:
    found = find_pod_specs(LAYOUTS["a bare pod spec under an unusual key"][0])
    assert [(f.replicas, f.counted) for f in found] == [(1, False)]
    roles = find_pod_specs(LAYOUTS["a list of roles, each with a count and a template"][0])
    assert [(f.replicas, f.counted) for f in roles] == [(4, True), (2, True), (1, False)]


def test_not_everything_with_containers_is_a_pod_spec() -> None:
    assert find_pod_specs({"spec": {"containers": ["x"], "list": [{"containers": [{"port": 1}]}]}}) == []


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_an_unknown_kind_with_accelerators_is_reported_not_skipped(name: str) -> None:
    obj, gpus, _ = LAYOUTS[name]
    decision = engine_with().evaluate(obj, RequestContext(namespace="ml", username="alice"))
    assert decision.skipped is None and not decision.allowed
    assert f"unknown kind {obj['kind']}" in (decision.error or "")
    assert f"with {gpus} accelerator{'' if gpus == 1 else 's'}" in (decision.error or "")


def test_an_unknown_kind_without_accelerators_is_left_alone() -> None:
    obj = {"apiVersion": "ui.example.io/v1", "kind": "Dashboard", "metadata": {"name": "d"},
           "spec": {"template": {"spec": {"containers": [{"name": "ui", "image": "registry.example/ui:1"}]}}}}
    decision = engine_with().evaluate(obj)
    assert decision.allowed and decision.skipped


CONFIG = """apiVersion: gpuguard.io/v1alpha1
kind: GpuguardConfig
kinds:
- group: dist.example.com
  versions: [v1]
  kind: ParameterServerJob
  plural: parameterserverjobs
  workloadClass: training
  gang: true
- group: serve.example.net
  versions: [v1]
  kind: ModelEndpoint
  plural: modelendpoints
  workloadClass: inference
  templates:
  - path: spec.runtime.engineSpec
"""


def _write(tmp_path: Path, docs: list[dict]) -> tuple[str, str]:
    manifests, config = tmp_path / "m.yaml", tmp_path / "config.yaml"
    manifests.write_text(yaml.safe_dump_all(docs))
    config.write_text(CONFIG)
    return str(manifests), str(config)


def test_every_shell_reports_an_unknown_kind_and_judges_a_configured_one(tmp_path: Path, capsys) -> None:
    ps, endpoint, sweep = (LAYOUTS[n][0] for n in ("templates in a map of named replica specs",
                                                    "a bare pod spec under an unusual key",
                                                    "templates inside trial specs"))
    manifests, config = _write(tmp_path, [ps, endpoint, sweep])
    assert main(["audit", manifests, "--config", config, "-o", "json"]) == 1
    results = {r["kind"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    # Configured: judged like a built-in (a gang without a gang scheduler; a server admitted and mutated).
    assert {v["policy"] for v in results["ParameterServerJob"]["violations"]} >= {"gang-scheduling",
                                                                                  "checkpoint-volume"}
    assert results["ModelEndpoint"]["allowed"] and results["ModelEndpoint"]["patch"]
    # Unknown: reported as not fully checked, with its accelerator count.
    (finding,) = results["HyperSweep"]["violations"]
    assert finding["policy"] == "not-fully-checked" and "unknown kind HyperSweep" in finding["message"]
    assert main(["evaluate", manifests, "--config", config, "--format", "json"]) == 0  # evaluate shows, never fails
    evaluated = {r["kind"]: r for r in json.loads(capsys.readouterr().out)}
    assert "unknown kind HyperSweep" in json.dumps(evaluated["HyperSweep"])
    assert main(["fix", manifests, "--config", config]) == 1
    fixed = list(yaml.safe_load_all(Path(manifests).read_text()))
    assert fixed[1]["spec"]["runtime"]["engineSpec"]["tolerations"]  # the configured server was mutated
    assert "unknown kind HyperSweep" in capsys.readouterr().out


def test_webhook_config_intercepts_a_configured_kind(tmp_path: Path, capsys) -> None:
    _, config = _write(tmp_path, [])
    assert main(["webhook-config", "--config", config, "--url", "https://127.0.0.1:8443"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    hooks = {h["name"]: h for d in docs for h in d["webhooks"]}
    rules = hooks["dist.example.com.mutate.gpuguard.io"]["rules"]
    assert rules[0]["apiGroups"] == ["dist.example.com"] and "parameterserverjobs" in rules[0]["resources"]
    assert "serve.example.net.validate.gpuguard.io" in hooks


def test_a_config_may_not_redefine_a_built_in_kind(tmp_path: Path) -> None:
    from gpuguard.webhook.config import ConfigError, parse_config_text
    with pytest.raises(ConfigError, match="batch/Job is built in"):
        parse_config_text("kind: GpuguardConfig\nkinds:\n- {group: batch, versions: [v1], kind: Job, plural: jobs}\n")


def test_a_crd_schema_says_whether_it_holds_a_pod_spec() -> None:
    from gpuguard.workloads.structural import schema_holds_pod_spec
    container = {"type": "object", "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}
    holds = {"type": "object", "properties": {"spec": {"type": "object", "properties": {"roles": {
        "type": "array", "items": {"type": "object", "properties": {"template": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"containers": {"type": "array", "items": container}}}}}}}}}}}}
    assert schema_holds_pod_spec(holds) is True
    no_pods = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "containers": {"type": "array", "items": {"type": "string"}}, "size": {"type": "integer"}}}}}
    assert schema_holds_pod_spec(no_pods) is False
    assert schema_holds_pod_spec({"type": "object", "x-kubernetes-preserve-unknown-fields": True}) is None
