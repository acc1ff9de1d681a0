"""Mutating policies on every kind they apply to, idempotent (single cases: ``tests/policies/<id>/``)."""

from __future__ import annotations

import copy

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads.inventory import from_objects
from tests.support.builders import (
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
from tests.support.engines import BASE, engine_with, evaluate_twice, only


# ---------------------------------------------------------------- gpu-tolerations
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_tolerations_added_on_every_kind(kind):
    out = evaluate_twice(only("gpu-tolerations"), make(kind, pvc_pod_spec(), replicas=2)).mutated
    for spec in template_specs(out):
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize("existing", [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists"},
    {"operator": "Exists"},
])
def test_equal_or_wider_toleration_is_not_duplicated(existing):
    spec = pvc_pod_spec()
    spec["tolerations"] = [existing]
    out = only("gpu-tolerations").evaluate(make("Job", spec))
    assert out.patch == []


def test_narrower_toleration_gets_the_wider_one_added():
    spec = pvc_pod_spec()
    spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
                           {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]
    out = only("gpu-tolerations").evaluate(make("Job", spec)).mutated
    assert len(template_specs(out)[0]["tolerations"]) == 3


def test_tolerations_per_accelerator_profile_from_config():
    engine = Engine(parse_config_text(
        BASE + "accelerators:\n- {name: amd-gpu, tolerations: [{key: gpu-pool, operator: Equal, value: amd}]}\n"
        "- {name: nvidia-gpu, tolerations: []}\n"
        "policies:\n" + "\n".join(f"  {p}: {{action: off}}" for p in _ids() if p != "gpu-tolerations") + "\n"))
    spec = pvc_pod_spec()
    spec["containers"][0]["resources"] = {"limits": {"amd.com/gpu": 1}}
    out = evaluate_twice(engine, make("Pod", spec)).mutated
    assert out["spec"]["tolerations"] == [{"key": "gpu-pool", "operator": "Equal", "value": "amd",
                                           "effect": "NoSchedule"}]
    nvidia = engine.evaluate(make("Pod", pvc_pod_spec()))
    assert nvidia.patch == []


def _ids() -> list[str]:
    from gpuguard.policies import REGISTRY

    return list(REGISTRY)


# ---------------------------------------------------------------- gpu-node-affinity
REQUIRED_GPU_LABEL = ("accelerators:\n- name: nvidia-gpu\n  nodeSelection: {key: nvidia.com/gpu.present, operator: In, "
                      "values: ['true'], required: true}\n")
GKE_NODES = [
    {"apiVersion": "v1", "kind": "Node",
     "metadata": {"name": "cpu", "labels": {"cloud.google.com/gke-nodepool": "default"}},
     "status": {"allocatable": {"cpu": "8", "memory": "30Gi"}}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "l4", "labels": {
        "cloud.google.com/gke-nodepool": "l4", "cloud.google.com/gke-accelerator": "nvidia-l4"}},
     "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
     "status": {"allocatable": {"cpu": "23", "memory": "87Gi", "nvidia.com/gpu": "2"}}},
]


def _only_with(policy: str, extra: str) -> Engine:
    return Engine(parse_config_text(BASE + extra + "policies:\n" + "\n".join(
        f"  {p}: {{action: off}}" for p in _ids() if p != policy) + "\n"))


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_node_affinity_on_every_kind_without_inventory_is_preferred(kind):
    out = evaluate_twice(only("gpu-node-affinity"), make(kind, pvc_pod_spec())).mutated
    for spec in template_specs(out):
        node_affinity = spec["affinity"]["nodeAffinity"]
        assert "requiredDuringSchedulingIgnoredDuringExecution" not in node_affinity
        assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 100, "preference": {
            "matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}}]


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_node_affinity_on_every_kind_from_the_gke_inventory(kind):
    engine = only("gpu-node-affinity")
    engine.set_nodes(from_objects(copy.deepcopy(GKE_NODES)))
    out = evaluate_twice(engine, make(kind, pvc_pod_spec())).mutated
    for spec in template_specs(out):
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "In",
                                                "values": ["nvidia-l4"]}]}]
        assert "nvidia.com/gpu.present" not in str(spec)


def test_node_affinity_added_to_every_ored_term_and_user_terms_kept():
    spec = pvc_pod_spec()
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]},
    ]}}}
    out = evaluate_twice(_only_with("gpu-node-affinity", REQUIRED_GPU_LABEL), make("Job", spec)).mutated
    terms = template_specs(out)[0]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    gpu = {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
    assert terms[0]["matchExpressions"] == [{"key": "zone", "operator": "In", "values": ["a"]}, gpu]
    assert terms[1]["matchExpressions"] == [gpu] and terms[1]["matchFields"]
    assert terms[2]["matchExpressions"] == [{"key": "nvidia.com/gpu.present", "operator": "Exists"}]


def test_node_selector_on_the_label_is_respected():
    spec = pvc_pod_spec()
    spec["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    assert only("gpu-node-affinity").evaluate(make("Job", spec)).patch == []


def test_preferred_product_and_keep_cpu_pods_off():
    engine = Engine(parse_config_text(
        BASE + "accelerators:\n- name: nvidia-gpu\n  preferred: [{key: nvidia.com/gpu.product, "
        "values: [NVIDIA-H100-80GB-HBM3]}]\npolicies:\n"
        + "\n".join(f"  {p}: {{action: off}}" for p in _ids() if p != "gpu-node-affinity")
        + "\n  gpu-node-affinity: {keepNonGpuPodsOff: true}\n"))
    out = evaluate_twice(engine, make("Job", pvc_pod_spec())).mutated
    pref = template_specs(out)[0]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [p["preference"]["matchExpressions"][0]["values"] for p in pref] == [["true"], ["NVIDIA-H100-80GB-HBM3"]]
    cpu = evaluate_twice(engine, make("Deployment", {"containers": [cpu_container()]})).mutated
    expr = template_specs(cpu)[0]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]
    exprs = template_specs(cpu)[0]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert expr["operator"] == "NotIn"
    # every profile's node selection is negated: TPU nodes too, not only NVIDIA ones
    assert {"key": "cloud.google.com/gke-tpu-accelerator", "operator": "DoesNotExist"} in exprs


# ---------------------------------------------------------------- default-resources
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_default_resources_sized_per_gpu(kind):
    out = evaluate_twice(only("default-resources"), make(kind, pvc_pod_spec(gpus=2))).mutated
    for spec in template_specs(out):
        res = spec["containers"][0]["resources"]
        assert res["requests"] == {"cpu": "16", "memory": "128Gi", "ephemeral-storage": "100Gi"}
        assert res["limits"] == {"nvidia.com/gpu": 2, "memory": "128Gi", "ephemeral-storage": "200Gi"}
        assert "cpu" not in res["limits"]


def test_default_resources_never_lower_user_values_and_sidecars_are_flat():
    spec = pvc_pod_spec(gpus=1)
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": "4"},
                                          "requests": {"memory": "200Gi"}}
    spec["containers"].append(cpu_container("sidecar"))
    out = evaluate_twice(only("default-resources"), make("Job", spec)).mutated
    main, sidecar = template_specs(out)[0]["containers"]
    assert "cpu" not in main["resources"]["requests"]  # the limit implies the request
    assert main["resources"]["limits"]["cpu"] == "4"
    assert main["resources"]["requests"]["memory"] == "200Gi"
    assert main["resources"]["limits"]["memory"] == "200Gi"  # never below the request
    assert sidecar["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}


def test_default_resources_settings_and_non_gpu_pods():
    engine = Engine(parse_config_text(
        BASE + 'accelerators:\n- {name: nvidia-gpu, sizing: {cpu: "12", memory: 96Gi, ephemeralStorage: 10Gi}}\n'
        "policies:\n" + "\n".join(f"  {p}: {{action: off}}" for p in _ids() if p != "default-resources")
        + "\n  default-resources: {memoryLimitFactor: {notebook: 2.0}, setCpuLimit: true, "
        "applyToNonGpuPods: true}\n"))
    out = engine.evaluate(make("Notebook", pvc_pod_spec())).mutated
    res = template_specs(out)[0]["containers"][0]["resources"]
    assert res["requests"]["cpu"] == "12" and res["limits"]["cpu"] == "12"
    assert res["limits"]["memory"] == "192Gi"
    cpu = engine.evaluate(make("Deployment", {"containers": [cpu_container()]})).mutated
    assert template_specs(cpu)[0]["containers"][0]["resources"]["requests"]["cpu"] == "500m"


# ---------------------------------------------------------------- priority-class
@pytest.mark.parametrize("kind,expected", [(k, "training-standard") for k in TRAINING_KINDS] +
                         [(k, "inference-critical") for k in INFERENCE_KINDS if k != "DaemonSet"] +
                         [("DaemonSet", "inference-standard"), ("Notebook", "notebook-dev")])
def test_priority_class_by_workload_class(kind, expected):
    out = evaluate_twice(only("priority-class"), make(kind, pvc_pod_spec())).mutated
    assert {s["priorityClassName"] for s in template_specs(out)} == {expected}


PRIORITY_AND_GRANTS = "priority-class", "workload-class"


def _with_grants(granted: str) -> object:
    """priority-class and workload-class on (the latter's allowEscalationTo is what a namespace grants)."""
    from gpuguard.policies import REGISTRY
    from tests.support.engines import engine_with

    lines = [f"  {pid}: {{action: off}}" for pid in REGISTRY if pid not in PRIORITY_AND_GRANTS]
    lines += ["  priority-class: {action: enforce}",
              f"  workload-class: {{action: enforce, allowEscalationTo: [{granted}]}}"]
    return engine_with("\n".join(lines) + "\n")


@pytest.mark.parametrize("kind", INFERENCE_KINDS)
def test_a_preempting_class_comes_only_from_the_namespaces_grant(kind):
    """Privilege never comes from shape: an inference kind preempts only where its namespace grants inference;
    elsewhere it is still a server, with the non-preempting serving class."""
    plain = evaluate_twice(_with_grants(""), make(kind, pvc_pod_spec())).mutated
    assert {s["priorityClassName"] for s in template_specs(plain)} == {"inference-standard"}
    granted = evaluate_twice(_with_grants("inference"), make(kind, pvc_pod_spec())).mutated
    expected = "inference-standard" if kind == "DaemonSet" else "inference-critical"  # never preempts every node
    assert {s["priorityClassName"] for s in template_specs(granted)} == {expected}


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
    from gpuguard.workloads import kinds as kinds_mod
    from gpuguard.workloads.kinds import get_path
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
def _shm_managed_by_operator() -> set[str]:
    from gpuguard.policies.shm_volume import Settings

    return {kind.rsplit("/", 1)[-1] for kind in Settings().operator_managed_kinds}


@pytest.mark.parametrize("kind", [k for k in ALL_KINDS if k not in _shm_managed_by_operator()])
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
