"""Validating policies on every kind they apply to; actions, profiles, exemptions.

Single cases of one policy are fixtures: ``tests/policies/<id>/``.
"""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import kinds
from tests.support.builders import (
    ALL_KINDS,
    BUILDER_NAMES,
    INFERENCE_KINDS,
    TRAINING_KINDS,
    bare_pod_spec,
    gpu_container,
    make,
    pvc_pod_spec,
)
from tests.support.engines import engine_with, only

VALIDATE = RequestContext(mutate=False)


def policies_hit(engine, obj, ctx=VALIDATE) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in engine.evaluate(obj, ctx).violations:
        out.setdefault(v.policy, []).append(v)
    return out


# ---------------------------------------------------------------- checkpoint-volume
@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_checkpoint_required_for_gpu_training(kind):
    """Kinds made to run to completion are training by evidence: denied.  A bare Pod's purpose is only read from
    what it runs (a sample, a benchmark, a one-off run all look alike), so its finding warns."""
    hits = policies_hit(only("checkpoint-volume"), make(kind, bare_pod_spec()))
    assert hits["checkpoint-volume"][0].verdict == ("warn" if kind == "Pod" else "deny")
    assert "no persistent volume for checkpoints" in hits["checkpoint-volume"][0].message


@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_checkpoint_pvc_passes(kind):
    assert policies_hit(only("checkpoint-volume"), make(kind, pvc_pod_spec())) == {}


@pytest.mark.parametrize("kind", INFERENCE_KINDS + ["Notebook"])
def test_checkpoint_not_required_outside_training(kind):
    assert policies_hit(only("checkpoint-volume"), make(kind, bare_pod_spec())) == {}


# ---------------------------------------------------------------- gpu-memory-guard
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_gpu_container_without_memory_limit_denied(kind):
    hits = policies_hit(only("gpu-memory-guard"), make(kind, pvc_pod_spec()))
    assert "BestEffort" in hits["gpu-memory-guard"][0].message


def test_unbounded_burstable_and_floor_warning():
    spec = pvc_pod_spec()
    spec["containers"][0]["resources"]["requests"] = {"memory": "8Gi"}
    hits = policies_hit(only("gpu-memory-guard"), make("Job", spec))
    assert "unbounded Burstable" in hits["gpu-memory-guard"][0].message
    spec["containers"][0]["resources"]["limits"]["memory"] = "8Gi"
    hits = policies_hit(only("gpu-memory-guard"), make("Job", spec))
    assert hits["gpu-memory-guard"][0].verdict == "warn" and "8Gi per device" in hits["gpu-memory-guard"][0].message
    spec["containers"][0]["resources"]["limits"]["memory"] = "64Gi"
    assert policies_hit(only("gpu-memory-guard"), make("Job", spec)) == {}


def test_default_config_mutation_satisfies_memory_guard():
    hits = policies_hit(engine_with(), make("Deployment", pvc_pod_spec()), RequestContext())
    assert "gpu-memory-guard" not in hits


# ---------------------------------------------------------------- gpu-request-shape
def _with_gpu_resources(resources: dict) -> dict:
    spec = pvc_pod_spec()
    spec["containers"][0]["resources"] = resources
    return spec


@pytest.mark.parametrize("kind", ALL_KINDS)
@pytest.mark.parametrize("resources,word", [
    ({"limits": {"nvidia.com/gpu": "0.5"}}, "whole units"),
    ({"requests": {"nvidia.com/gpu": 1}}, "without a limit"),
    ({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}, "differs from limits"),
    ({"limits": {"nvidia.com/gpu": 16}}, "a node has at most 8"),
])
def test_request_shape_denials(kind, resources, word):
    hits = policies_hit(only("gpu-request-shape"), make(kind, _with_gpu_resources(resources)))
    assert any(word in v.message for v in hits["gpu-request-shape"])


def test_request_shape_message_for_custom_resources_says_it_fails_late():
    obj = make("PyTorchJob", _with_gpu_resources({"requests": {"nvidia.com/gpu": 1},
                                                  "limits": {"nvidia.com/gpu": 2}}))
    hits = policies_hit(only("gpu-request-shape"), obj)
    assert "PyTorchJob is accepted but each pod it creates is rejected" in hits["gpu-request-shape"][0].message


def test_request_shape_accepts_equal_request_and_limit_and_checks_workload_total():
    ok = _with_gpu_resources({"requests": {"nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}})
    assert policies_hit(only("gpu-request-shape"), make("Job", ok)) == {}
    big = make("PyTorchJob", _with_gpu_resources({"limits": {"nvidia.com/gpu": 8}}), replicas=8)
    hits = policies_hit(only("gpu-request-shape"), big)
    assert "72 accelerators in all" in hits["gpu-request-shape"][0].message


def test_request_shape_node_cpu_and_memory():
    engine = only("gpu-request-shape", "maxCpuPerNode: '96', maxMemoryPerNode: 1Ti")
    spec = _with_gpu_resources({"limits": {"nvidia.com/gpu": 1, "memory": "2Ti"}, "requests": {"cpu": "200"}})
    messages = [v.message for v in policies_hit(engine, make("Job", spec))["gpu-request-shape"]]
    assert any("cpu 200" in m for m in messages) and any("memory" in m for m in messages)


# ---------------------------------------------------------------- gang-scheduling
@pytest.mark.parametrize("kind", [BUILDER_NAMES[k.api_group_kind] for k in kinds.KINDS
                                  if k.gang is not None and k.gang.own_scheduler is None])
def test_multi_pod_gpu_job_needs_gang_scheduler(kind):
    hits = policies_hit(only("gang-scheduling"), make(kind, pvc_pod_spec(), replicas=4))
    assert "no gang scheduler" in hits["gang-scheduling"][0].message


@pytest.mark.parametrize("kind", ["Job", "TFJob", "MPIJob"])
def test_single_pod_jobs_need_no_gang(kind):
    assert policies_hit(only("gang-scheduling"), make(kind, pvc_pod_spec(), replicas=1)) == {}


@pytest.mark.parametrize("kind", [BUILDER_NAMES[k.api_group_kind] for k in kinds.KINDS
                                  if k.gang is not None and k.gang.min_available is not None])
def test_a_gang_minimum_below_the_gpu_pods_is_fixed_by_that_number(kind):
    """Where the kind's gang is in place (its own scheduler, or a Kubeflow schedulingPolicy) but its minimum is
    short, the fix names that field and the number of GPU pods, not another way to gang."""
    obj = make(kind, pvc_pod_spec(), replicas=4)
    gang = kinds.lookup(obj["apiVersion"], obj["kind"]).gang
    if gang.operator_policy is not None:
        parent = obj
        for step in gang.operator_policy[:-1]:
            parent = parent.setdefault(step, {})
        parent[gang.operator_policy[-1]] = {}
    parent = obj
    for step in gang.min_available[:-1]:
        parent = parent.setdefault(step, {})
    parent[gang.min_available[-1]] = 1
    hits = policies_hit(only("gang-scheduling"), obj)
    (finding,) = hits["gang-scheduling"]
    pods = finding.message.split(" GPU pods")[0].rsplit(" ", 1)[-1]
    assert f"is 1, fewer than its {pods} GPU pods" in finding.message
    assert finding.fix.startswith(f"set {'.'.join(gang.min_available)} to {pods} (every GPU pod)")


# ---------------------------------------------------------------- inference-on-spot
@pytest.mark.parametrize("kind", INFERENCE_KINDS)
@pytest.mark.parametrize("how", ["selector", "affinity", "toleration"])
def test_inference_on_spot_warns(kind, how):
    spec = pvc_pod_spec()
    if how == "selector":
        spec["nodeSelector"] = {"karpenter.sh/capacity-type": "spot"}
    elif how == "affinity":
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "cloud.google.com/gke-spot", "operator": "In",
                                                         "values": ["true"]}]}]}}}
    else:
        spec["tolerations"] = [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal",
                                "value": "spot", "effect": "NoSchedule"}]
    serving = engine_with("  workload-class: {allowEscalationTo: [inference]}\n")  # a profile grants inference
    hits = policies_hit(serving, make(kind, spec))
    assert hits["inference-on-spot"][0].verdict == "warn"


# ---------------------------------------------------------------- ephemeral-storage
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_ephemeral_storage_warnings(kind):
    spec = pvc_pod_spec()
    spec["volumes"].append({"name": "cache", "emptyDir": {}})
    hits = policies_hit(engine_with(), make(kind, spec))
    messages = [v.message for v in hits["ephemeral-storage"]]
    assert all(v.verdict == "warn" for v in hits["ephemeral-storage"])
    assert any("sizeLimit" in m for m in messages) and any("ephemeral-storage limit" in m for m in messages)


# ---------------------------------------------------------------- priority-abuse
@pytest.mark.parametrize("kind", TRAINING_KINDS + ["Notebook"])
def test_training_and_notebooks_may_not_use_inference_class(kind):
    spec = pvc_pod_spec()
    spec["priorityClassName"] = "inference-critical"
    hits = policies_hit(only("priority-abuse"), make(kind, spec))
    assert "reserved for inference" in hits["priority-abuse"][0].message


@pytest.mark.parametrize("kind", [k for k in INFERENCE_KINDS if k != "DaemonSet"])
def test_inference_may_use_inference_class(kind):
    spec = pvc_pod_spec()
    spec["priorityClassName"] = "inference-critical"
    assert policies_hit(only("priority-abuse"), make(kind, spec)) == {}


def test_a_daemonset_may_never_use_the_preempting_class():
    spec = pvc_pod_spec()
    spec["priorityClassName"] = "inference-critical"
    (finding,) = policies_hit(only("priority-abuse"), make("DaemonSet", spec))["priority-abuse"]
    assert finding.verdict == "deny" and "preempt pods on every node" in finding.message


# ---------------------------------------------------------------- actions, profiles, exemptions
def test_actions_map_to_verdicts():
    obj = make("Job", bare_pod_spec())
    for action, verdict in (("warn", "warn"), ("audit", "audit")):
        hits = policies_hit(engine_with(f"  checkpoint-volume: {{action: {action}}}\n"), obj)
        assert {v.verdict for v in hits["checkpoint-volume"]} == {verdict}
    assert "checkpoint-volume" not in policies_hit(engine_with("  checkpoint-volume: {action: off}\n"), obj)


def test_namespace_profiles_by_name_and_labels():
    engine = engine_with(extra="profiles:\n- name: research\n  match: {namespaces: ['research-*']}\n"
                               "  policies: {checkpoint-volume: {action: warn}}\n")
    obj = make("Job", bare_pod_spec(), namespace="research-nlp")
    assert policies_hit(engine, obj)["checkpoint-volume"][0].verdict == "warn"
    obj = make("Job", bare_pod_spec(), namespace="prod")
    assert policies_hit(engine, obj)["checkpoint-volume"][0].verdict == "deny"
    default = Engine(load_config())  # the shipped file has a "sandbox" profile chosen by namespace label
    sandbox = RequestContext(mutate=False, namespace_labels={"gpuguard.io/profile": "sandbox"})
    assert policies_hit(default, obj, sandbox)["checkpoint-volume"][0].verdict == "warn"


def test_exemptions_by_namespace_user_service_account_group_never_annotation():
    engine = engine_with(extra="exemptions:\n  namespaces: [lab]\n  users: [alice]\n"
                               "  serviceAccounts: [ci/runner]\n  groups: [platform-admins]\n")
    obj = make("Job", bare_pod_spec(), namespace="lab")
    assert engine.evaluate(obj).skipped and engine.evaluate(obj).allowed
    obj = make("Job", bare_pod_spec(), namespace="prod")
    assert engine.evaluate(obj, RequestContext(username="alice")).skipped
    assert engine.evaluate(obj, RequestContext(username="system:serviceaccount:ci:runner")).skipped
    assert engine.evaluate(obj, RequestContext(username="bob", groups=("platform-admins",))).skipped
    obj["metadata"]["annotations"] = {"gpuguard.io/exempt": "true", "gpuguard.io/skip": "all"}
    assert not engine.evaluate(obj, RequestContext(username="bob")).allowed


def test_warn_only_policies_leave_object_allowed():
    spec = pvc_pod_spec()
    spec["containers"].append(gpu_container(1, name="two", env=[{"name": "CHECKPOINT_URI", "value": "s3://x"}]))
    decision = engine_with().evaluate(make("Job", spec))
    assert decision.allowed
