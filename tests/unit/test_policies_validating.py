"""Validating policies: positive and negative cases on each kind they apply to."""

from __future__ import annotations

import pytest

from tests.unit.test_policies_mutating import engine_with, only
from tests.unit.workloads import (
    ALL_KINDS,
    INFERENCE_KINDS,
    TRAINING_KINDS,
    bare_pod_spec,
    cpu_container,
    gpu_container,
    make,
    pvc_pod_spec,
)
from webhook.config import load_config
from webhook.decision import RequestContext
from webhook.engine import Engine

VALIDATE = RequestContext(mutate=False)


def policies_hit(engine, obj, ctx=VALIDATE) -> dict[str, list]:
    out: dict[str, list] = {}
    for v in engine.evaluate(obj, ctx).violations:
        out.setdefault(v.policy, []).append(v)
    return out


# ---------------------------------------------------------------- checkpoint-volume
@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_checkpoint_required_for_gpu_training(kind):
    hits = policies_hit(only("checkpoint-volume"), make(kind, bare_pod_spec()))
    assert hits["checkpoint-volume"][0].verdict == "deny"
    assert "no persistent volume for checkpoints" in hits["checkpoint-volume"][0].message


@pytest.mark.parametrize("kind", TRAINING_KINDS)
def test_checkpoint_pvc_passes(kind):
    assert policies_hit(only("checkpoint-volume"), make(kind, pvc_pod_spec())) == {}


@pytest.mark.parametrize("kind", INFERENCE_KINDS + ["Notebook"])
def test_checkpoint_not_required_outside_training(kind):
    assert policies_hit(only("checkpoint-volume"), make(kind, bare_pod_spec())) == {}


@pytest.mark.parametrize("env,ok", [
    ({"name": "CHECKPOINT_URI", "value": "s3://bucket/run"}, True),
    ({"name": "CHECKPOINT_URI", "value": "gs://bucket/run"}, True),
    ({"name": "CHECKPOINT_URI", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}, True),
    ({"name": "CHECKPOINT_URI", "value": "/tmp/x"}, False),
    ({"name": "OTHER", "value": "s3://bucket"}, False),
])
def test_object_store_checkpointing(env, ok):
    spec = bare_pod_spec()
    spec["containers"][0]["env"] = [env]
    assert (policies_hit(only("checkpoint-volume"), make("Job", spec)) == {}) is ok


@pytest.mark.parametrize("volume,word", [
    ({"emptyDir": {}}, "emptyDir"),
    ({"emptyDir": {"medium": "Memory"}}, "emptyDir"),
    ({"ephemeral": {"volumeClaimTemplate": {"spec": {}}}}, "generic ephemeral"),
    ({"hostPath": {"path": "/data"}}, "hostPath"),
    ({"csi": {"driver": "scratch.example.com"}}, "inline CSI"),
])
def test_checkpoint_mount_on_ephemeral_storage_rejected(volume, word):
    spec = pvc_pod_spec()
    spec["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"},
                                             {"name": "data", "mountPath": "/data"}]
    spec["volumes"] = [{"name": "ckpt", **volume}, {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
    hits = policies_hit(only("checkpoint-volume"), make("Job", spec))
    assert word in hits["checkpoint-volume"][0].message
    assert "mount /checkpoints" in hits["checkpoint-volume"][0].message


def test_checkpoint_env_path_on_container_filesystem_or_emptydir():
    spec = pvc_pod_spec()
    spec["containers"][0]["env"] = [{"name": "CHECKPOINT_DIR", "value": "/scratch/ckpt"}]
    hits = policies_hit(only("checkpoint-volume"), make("Job", spec))
    assert "writable layer" in hits["checkpoint-volume"][0].message
    spec["containers"][0]["volumeMounts"].append({"name": "scratch", "mountPath": "/scratch"})
    spec["volumes"].append({"name": "scratch", "emptyDir": {}})
    hits = policies_hit(only("checkpoint-volume"), make("Job", spec))
    assert "CHECKPOINT_DIR=/scratch/ckpt is on an emptyDir" in hits["checkpoint-volume"][0].message
    spec["containers"][0]["env"] = [{"name": "CHECKPOINT_DIR", "value": "/checkpoints/run1"}]
    assert policies_hit(only("checkpoint-volume"), make("Job", spec)) == {}


def test_read_only_pvc_does_not_hold_checkpoints_and_durable_csi_does():
    spec = pvc_pod_spec()
    spec["containers"][0]["volumeMounts"][0]["readOnly"] = True
    assert "checkpoint-volume" in policies_hit(only("checkpoint-volume"), make("Job", spec))
    spec = pvc_pod_spec()
    spec["volumes"] = [{"name": "ckpt", "csi": {"driver": "gcsfuse.csi.storage.gke.io"}}]
    assert policies_hit(only("checkpoint-volume"), make("Job", spec)) == {}


def test_jobset_claim_policy_deleted_with_jobset_is_not_persistent():
    spec = bare_pod_spec()
    spec["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    obj = make("JobSet", spec)
    obj["spec"]["volumeClaimPolicies"] = [{"templates": [{"metadata": {"name": "ckpt"}, "spec": {}}]}]
    hits = policies_hit(only("checkpoint-volume"), obj)
    assert "deleted with the JobSet" in hits["checkpoint-volume"][0].message
    obj["spec"]["volumeClaimPolicies"][0]["retentionPolicy"] = {"whenDeleted": "Retain"}
    assert policies_hit(only("checkpoint-volume"), obj) == {}


def test_volcano_job_volumes_owned_by_the_job_are_not_persistent():
    obj = make("VolcanoJob", bare_pod_spec())
    obj["spec"]["volumes"] = [{"mountPath": "/checkpoints", "volumeClaim": {"resources": {}}}]
    hits = policies_hit(only("checkpoint-volume"), obj)
    assert "Volcano Job creates" in hits["checkpoint-volume"][0].message
    obj["spec"]["volumes"] = [{"mountPath": "/checkpoints", "volumeClaimName": "team-ckpt"}]
    assert policies_hit(only("checkpoint-volume"), obj) == {}


def test_checkpoint_only_checks_gpu_containers():
    spec = pvc_pod_spec()
    spec["containers"].append(cpu_container("logger"))
    assert policies_hit(only("checkpoint-volume"), make("Job", spec)) == {}


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
@pytest.mark.parametrize("kind", ["Job", "PyTorchJob", "TFJob", "MPIJob", "JobSet"])
def test_multi_pod_gpu_job_needs_gang_scheduler(kind):
    hits = policies_hit(only("gang-scheduling"), make(kind, pvc_pod_spec(), replicas=4))
    assert "no gang scheduler" in hits["gang-scheduling"][0].message


@pytest.mark.parametrize("kind", ["Job", "TFJob", "MPIJob"])
def test_single_pod_jobs_need_no_gang(kind):
    assert policies_hit(only("gang-scheduling"), make(kind, pvc_pod_spec(), replicas=1)) == {}


@pytest.mark.parametrize("how", ["scheduler", "kueue", "podgroup", "kubeflow"])
def test_gang_scheduler_accepted(how):
    spec = pvc_pod_spec()
    if how == "scheduler":
        spec["schedulerName"] = "volcano"
    obj = make("PyTorchJob", spec, replicas=4)
    if how == "kueue":
        obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
    if how == "podgroup":
        for role in obj["spec"]["pytorchReplicaSpecs"].values():
            role["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "pg"
    if how == "kubeflow":
        obj["spec"]["runPolicy"]["schedulingPolicy"] = {"minAvailable": 5}
    assert policies_hit(only("gang-scheduling"), obj) == {}


def test_volcano_job_gang_by_default_unless_other_scheduler():
    obj = make("VolcanoJob", pvc_pod_spec(), replicas=4)
    assert policies_hit(only("gang-scheduling"), obj) == {}
    obj["spec"]["schedulerName"] = "default-scheduler"
    assert "gang-scheduling" in policies_hit(only("gang-scheduling"), obj)


def test_gang_not_for_deployments_or_cpu_jobs():
    assert policies_hit(only("gang-scheduling"), make("Deployment", pvc_pod_spec(), replicas=4)) == {}
    assert policies_hit(only("gang-scheduling"), make("Job", {"containers": [cpu_container()]}, replicas=4)) == {}


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
    hits = policies_hit(engine_with(), make(kind, spec))
    assert hits["inference-on-spot"][0].verdict == "warn"


def test_training_on_spot_and_on_demand_inference_do_not_warn():
    spec = pvc_pod_spec()
    spec["nodeSelector"] = {"karpenter.sh/capacity-type": "spot"}
    assert "inference-on-spot" not in policies_hit(engine_with(), make("Job", spec))
    spec["nodeSelector"] = {"karpenter.sh/capacity-type": "on-demand"}
    assert "inference-on-spot" not in policies_hit(engine_with(), make("Deployment", spec))


# ---------------------------------------------------------------- ephemeral-storage
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_ephemeral_storage_warnings(kind):
    spec = pvc_pod_spec()
    spec["volumes"].append({"name": "cache", "emptyDir": {}})
    hits = policies_hit(engine_with(), make(kind, spec))
    messages = [v.message for v in hits["ephemeral-storage"]]
    assert all(v.verdict == "warn" for v in hits["ephemeral-storage"])
    assert any("sizeLimit" in m for m in messages) and any("ephemeral-storage limit" in m for m in messages)


def test_ephemeral_storage_clean_after_default_mutation():
    hits = policies_hit(engine_with(), make("Job", pvc_pod_spec()), RequestContext())
    assert "ephemeral-storage" not in hits


# ---------------------------------------------------------------- priority-abuse
@pytest.mark.parametrize("kind", TRAINING_KINDS + ["Notebook"])
def test_training_and_notebooks_may_not_use_inference_class(kind):
    spec = pvc_pod_spec()
    spec["priorityClassName"] = "inference-critical"
    hits = policies_hit(only("priority-abuse"), make(kind, spec))
    assert "reserved for inference" in hits["priority-abuse"][0].message


@pytest.mark.parametrize("kind", INFERENCE_KINDS)
def test_inference_may_use_inference_class(kind):
    spec = pvc_pod_spec()
    spec["priorityClassName"] = "inference-critical"
    assert policies_hit(only("priority-abuse"), make(kind, spec)) == {}


def test_priority_abuse_in_kubeflow_scheduling_policy():
    obj = make("PyTorchJob", pvc_pod_spec())
    obj["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "inference-critical"}
    hits = policies_hit(only("priority-abuse"), obj)
    assert hits["priority-abuse"][0].path == "spec.runPolicy.schedulingPolicy.priorityClass"


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
