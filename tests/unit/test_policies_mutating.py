"""Mutating policies on every kind they apply to, idempotent (single cases: ``tests/policies/<id>/``)."""

from __future__ import annotations

import copy

import pytest

from tests.unit.conftest import BASE, engine_with, evaluate_twice, only
from tests.unit.workloads import (
    ALL_KINDS,
    INFERENCE_KINDS,
    JOB_KINDS_WITH_TTL,
    TRAINING_KINDS,
    cpu_container,
    gpu_container,
    job_field,
    make,
    pvc_pod_spec,
    template_specs,
)
from webhook.config import parse_config_text
from webhook.engine import Engine


# ---------------------------------------------------------------- gpu-tolerations
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_tolerations_added_on_every_kind(kind):
    out = evaluate_twice(only("gpu-tolerations"), make(kind, pvc_pod_spec(), replicas=2)).mutated
    for spec in template_specs(out):
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


# ---------------------------------------------------------------- gpu-node-affinity
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_node_affinity_on_every_kind(kind):
    out = evaluate_twice(only("gpu-node-affinity"), make(kind, pvc_pod_spec())).mutated
    for spec in template_specs(out):
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In",
                                                "values": ["true"]}]}]


# ---------------------------------------------------------------- default-resources
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_default_resources_sized_per_gpu(kind):
    out = evaluate_twice(only("default-resources"), make(kind, pvc_pod_spec(gpus=2))).mutated
    for spec in template_specs(out):
        res = spec["containers"][0]["resources"]
        assert res["requests"] == {"cpu": "16", "memory": "128Gi", "ephemeral-storage": "100Gi"}
        assert res["limits"] == {"nvidia.com/gpu": 2, "memory": "128Gi", "ephemeral-storage": "200Gi"}
        assert "cpu" not in res["limits"]


# ---------------------------------------------------------------- priority-class
@pytest.mark.parametrize("kind,expected", [(k, "training-standard") for k in TRAINING_KINDS] +
                         [(k, "inference-critical") for k in INFERENCE_KINDS] + [("Notebook", "notebook-dev")])
def test_priority_class_by_workload_class(kind, expected):
    out = evaluate_twice(only("priority-class"), make(kind, pvc_pod_spec())).mutated
    assert {s["priorityClassName"] for s in template_specs(out)} == {expected}


# ---------------------------------------------------------------- job-ttl and job-limits
@pytest.mark.parametrize("kind", JOB_KINDS_WITH_TTL)
def test_ttl_set_on_each_kinds_own_field(kind):
    out = evaluate_twice(only("job-ttl"), make(kind, pvc_pod_spec())).mutated
    assert job_field(out, "ttl") == 86400


@pytest.mark.parametrize("kind", JOB_KINDS_WITH_TTL)
def test_ttl_capped_and_lower_user_value_kept(kind):
    engine = only("job-ttl")
    obj = make(kind, pvc_pod_spec())
    first = engine.evaluate(obj).mutated
    # put a too-large TTL where the kind keeps it and check it is capped
    from workloads import kinds as kinds_mod
    from workloads.kinds import get_path
    path = kinds_mod.lookup(obj["apiVersion"], obj["kind"]).job.ttl
    get_path(first, path[:-1])[path[-1]] = 10**7
    assert job_field(engine.evaluate(first).mutated, "ttl") == 604800
    get_path(first, path[:-1])[path[-1]] = 60
    assert engine.evaluate(first).patch == []


@pytest.mark.parametrize("kind", ["Job", "CronJob", "PyTorchJob", "MPIJob", "Pod", "RayJob", "VolcanoJob"])
def test_job_limits_on_gpu_training(kind):
    out = evaluate_twice(only("job-limits"), make(kind, pvc_pod_spec())).mutated
    if kind not in ("Pod", "RayJob"):
        assert job_field(out, "backoff") == 3
    if kind != "VolcanoJob":
        assert job_field(out, "deadline") == 86400


# ---------------------------------------------------------------- shm-volume
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_shm_volume_on_every_kind(kind):
    out = evaluate_twice(only("shm-volume"), make(kind, pvc_pod_spec())).mutated
    for spec in template_specs(out):
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in spec["volumes"]
        assert {"name": "dshm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]


def test_mutating_policy_in_warn_mode_reports_instead_of_changing():
    engine = engine_with("  gpu-tolerations: {action: warn}\n  job-ttl: {action: audit}\n")
    decision = engine.evaluate(make("Job", pvc_pod_spec()))
    warn = [v for v in decision.violations if v.policy == "gpu-tolerations"]
    assert warn and warn[0].verdict == "warn" and "/spec/template/spec/tolerations" in warn[0].message
    assert [v.verdict for v in decision.violations if v.policy == "job-ttl"] == ["audit"]
    assert "tolerations" not in template_specs(decision.mutated)[0]
    assert "ttlSecondsAfterFinished" not in decision.mutated["spec"]
    assert decision.allowed


def test_annotation_lists_mutating_policies_and_merges():
    obj = make("Job", pvc_pod_spec())
    obj["metadata"]["annotations"] = {"gpuguard.io/mutated-by": "earlier"}
    decision = only("job-ttl").evaluate(obj)
    assert decision.mutated["metadata"]["annotations"]["gpuguard.io/mutated-by"] == "earlier,job-ttl"
    assert decision.mutated_by == ["job-ttl"]


def test_full_default_set_is_idempotent_with_user_content():
    spec = pvc_pod_spec(gpus=4)
    spec["containers"].append(gpu_container(2, name="second", env=[{"name": "CHECKPOINT_URI", "value": "s3://b/x"}]))
    spec["initContainers"] = [cpu_container("init")]
    spec["tolerations"] = [{"key": "other", "operator": "Exists"}]
    obj = make("PyTorchJob", spec, replicas=2)
    obj["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 3}
    first = evaluate_twice(Engine(parse_config_text(BASE)), copy.deepcopy(obj))
    assert first.allowed, [v.text for v in first.violations]


MUTATING = [p.id for p in __import__("policies").REGISTRY.values() if p.phase == "mutating"]


@pytest.mark.parametrize("policy_id", MUTATING)
@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("spec_factory", [pvc_pod_spec, lambda: {"containers": [cpu_container()]}])
def test_policy_reports_a_change_exactly_when_it_makes_one(policy_id, kind, spec_factory):
    """``run`` returns whether it changed the object: that names it in the mutated-by annotation."""
    engine = only(policy_id, "keepNonGpuPodsOff: true" if policy_id == "gpu-node-affinity" else "")
    first = engine.evaluate(make(kind, spec_factory(), replicas=2))
    assert (first.mutated_by == [policy_id]) == bool(first.patch)
    second = engine.evaluate(first.mutated)
    assert second.mutated_by == [] and second.patch == []
