"""Accelerator profiles, the kubelet's counting rule, pod-level resources and DRA claims."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest

from gpuguard.webhook.config import ConfigError, load_config, parse_config_text
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads.claims import StaticClaims, device_requests
from gpuguard.workloads.kinds import lookup
from gpuguard.workloads.view import build_view
from tests.support.paths import REPO

CONFIG = load_config()
FIXTURES = REPO / "tests" / "fixtures" / "configs"


def view_of(obj: dict, claims=None):
    kind = lookup(obj["apiVersion"], obj["kind"])
    return build_view(obj, kind, CONFIG.accelerators, "training", namespace="ml", claims=claims)


def pod(containers: list[dict], init: list[dict] | None = None, **spec) -> dict:
    body = {"containers": containers, **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": body}


def ctr(name: str, gpus: int = 0, resource: str = "nvidia.com/gpu", sidecar: bool = False, **limits) -> dict:
    out: dict = {"name": name, "image": "x", "resources": {"limits": {resource: gpus, **limits} if gpus else limits}}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


# ---------------------------------------------------------------- the kubelet's effective request
def test_native_sidecar_gpus_add_to_the_app_containers():
    template = view_of(pod([ctr("app", 8)], [ctr("side", 8, sidecar=True)])).templates[0]
    assert template.gpus_per_pod == 16


def test_regular_init_container_is_maxed_with_the_app():
    template = view_of(pod([ctr("app", 8)], [ctr("init", 8)])).templates[0]
    assert template.gpus_per_pod == 8


def test_init_container_after_a_sidecar_runs_beside_it():
    # sidecar 2 starts first; the init container (6) then runs beside it: 8 > app 1 + sidecar 2
    template = view_of(pod([ctr("app", 1)], [ctr("side", 2, sidecar=True), ctr("init", 6)])).templates[0]
    assert template.gpus_per_pod == 8


def test_init_container_before_a_sidecar_does_not_see_it():
    template = view_of(pod([ctr("app", 1)], [ctr("init", 6), ctr("side", 2, sidecar=True)])).templates[0]
    assert template.gpus_per_pod == 6


def test_workload_total_counts_sidecars_per_replica():
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 16, "template": {"spec": {"containers": [ctr("app", 4)],
                                                              "initContainers": [ctr("s", 4, sidecar=True)]}}}}
    view = view_of(job)
    assert view.total_gpus == 128 and view.gpus_by_resource() == {"nvidia.com/gpu": 128}


def test_pod_request_of_cpu_follows_sidecars_and_pod_level():
    spec = pod([ctr("app", 1, cpu="4")], [ctr("side", 0, sidecar=True, cpu="2"), ctr("init", 0, cpu="5")])
    assert view_of(spec).templates[0].pod_request("cpu") == Decimal(7)  # max(4 + 2, 5 + 2)
    spec["spec"]["resources"] = {"limits": {"cpu": "3"}}
    assert view_of(spec).templates[0].pod_request("cpu") == Decimal(3)


# ---------------------------------------------------------------- profiles
@pytest.mark.parametrize("resource,profile", [
    ("nvidia.com/gpu", "nvidia-gpu"), ("nvidia.com/mig-2g.20gb", "nvidia-mig"), ("nvidia.com/gpu.shared",
     "nvidia-shared"), ("amd.com/gpu", "amd-gpu"), ("gpu.intel.com/i915", "intel-gpu"), ("gpu.intel.com/xe",
     "intel-gpu"), ("habana.ai/gaudi", "gaudi"), ("aws.amazon.com/neuron", "neuron-device"),
    ("aws.amazon.com/neurondevice", "neuron-device"), ("aws.amazon.com/neuroncore", "neuron-core"),
    ("google.com/tpu", "tpu"),
])
def test_every_shipped_resource_has_its_profile(resource, profile):
    assert CONFIG.accelerators.profile_for(resource).name == profile


def test_companion_resources_are_not_accelerators():
    for name in ("nvidia.com/gpucores", "nvidia.com/gpumem", "gpu.intel.com/millicores", "cpu", "memory",
                 "vpc.amazonaws.com/efa"):
        assert not CONFIG.accelerators.is_accelerator(name)


def test_hami_profile_only_with_its_companion_resources():
    accelerators = CONFIG.accelerators
    assert accelerators.profile_for("nvidia.com/gpu", ["nvidia.com/gpu", "nvidia.com/gpumem"]).name == "hami-vgpu"
    assert accelerators.profile_for("nvidia.com/gpu", ["nvidia.com/gpu"]).name == "nvidia-gpu"


def test_slice_fractions():
    mig = CONFIG.accelerators.by_name["nvidia-mig"]
    assert mig.fraction("nvidia.com/mig-3g.40gb") == Decimal(3) / 7
    hami = CONFIG.accelerators.by_name["hami-vgpu"]
    assert hami.fraction("nvidia.com/gpu", {"nvidia.com/gpucores": 30}) == Decimal("0.3")
    assert hami.fraction("nvidia.com/gpu", {"nvidia.com/gpumem": 4000}) == Decimal("0.25")  # the fallback
    assert CONFIG.accelerators.by_name["tpu"].fraction("google.com/tpu") == 1


def test_config_profiles_merge_by_name_and_new_ones_come_first():
    config = parse_config_text(
        "kind: GpuguardConfig\naccelerators:\n"
        "- {name: nvidia-gpu, maxPerNode: 4}\n"
        "- {name: a100-pool, resources: [nvidia.com/gpu], nodeSelection: {key: pool, values: [a100]}, "
        "whenAlsoRequested: [example.com/a100]}\n"
        "- {name: gaudi, disabled: true}\n")
    acc = config.accelerators
    assert acc.profiles[0].name == "a100-pool"
    assert acc.by_name["nvidia-gpu"].max_per_node == 4
    assert acc.by_name["nvidia-gpu"].node_selection.key == "nvidia.com/gpu.present"  # kept from the shipped one
    assert "gaudi" not in acc.by_name and not config.accelerators.is_accelerator("habana.ai/gaudi")


@pytest.mark.parametrize("text,message", [
    ("- {name: x, resources: [a.io/x], sizing: {mode: perSlice, sliceOf: nope, fraction: 0.5}}",
     "cfg.yaml:3: accelerators[x]: sizing.sliceOf names 'nope'"),
    ("- {name: x}", "cfg.yaml:3: accelerators.0: Value error, a profile needs resources or deviceClasses"),
    ("- {name: x, resources: [a.io/x], nodeSelection: {key: k, operator: In}}",
     "cfg.yaml:3: accelerators.0.nodeSelection: Value error, operator In needs values"),
    ("- {name: x, resources: [a.io/x], sizing: {mode: perSlice, sliceOf: nvidia-gpu}}",
     "needs fraction, fractionFromName or fractionFromResources"),
    ("- {name: x, resources: [a.io/x], maxPerNod: 3}", "cfg.yaml:3: accelerators.0.maxPerNod: unknown key"),
])
def test_bad_profiles_are_refused_with_the_line(text, message):
    with pytest.raises(ConfigError) as exc:
        parse_config_text("kind: GpuguardConfig\naccelerators:\n" + text + "\n", "cfg.yaml")
    assert message in str(exc.value)


# ---------------------------------------------------------------- configs from before profiles
def test_an_unedited_pre_profile_config_loads_with_warnings(caplog):
    with caplog.at_level(logging.WARNING, logger="gpuguard.config"):
        config = load_config(FIXTURES / "pre-profiles.yaml")
    assert config.accelerators.profile_for("google.com/tpu").name == "tpu"
    text = caplog.text
    assert "pre-profiles.yaml:12: gpuResources: ignored" in text
    assert "policies.gpu-node-affinity.gpuNodeLabel: ignored" in text


@pytest.mark.parametrize("text,where", [
    ("gpuResources: [nvidia.com/gpu]\n", "cfg.yaml:2: gpuResources: replaced by `accelerators:`"),
    ("policies:\n  gpu-node-affinity:\n    gpuNodeLabel: {key: gpu, values: [yes]}\n",
     "cfg.yaml:4: policies.gpu-node-affinity.gpuNodeLabel: per-resource settings moved"),
    ("policies:\n  default-resources:\n    perGpu: {cpu: '12', memory: 96Gi, ephemeralStorage: 10Gi}\n",
     "each accelerator profile's `sizing`"),
    ("policies:\n  gpu-tolerations:\n    tolerations: {amd.com/gpu: [{key: amd.com/gpu}]}\n",
     "policies.gpu-tolerations.tolerations"),
    ("policies:\n  gpu-request-shape:\n    maxGpusPerNode: 16\n", "`maxPerNode`"),
    ("profiles:\n- name: p\n  match: {namespaces: [a]}\n  policies:\n    gpu-request-shape: {maxGpusPerNode: 4}\n",
     "cfg.yaml:6: profiles.0.policies.gpu-request-shape.maxGpusPerNode"),
])
def test_an_edited_pre_profile_key_is_refused_with_where_it_went(text, where):
    with pytest.raises(ConfigError) as exc:
        parse_config_text("kind: GpuguardConfig\n" + text, "cfg.yaml")
    assert where in str(exc.value)


# ---------------------------------------------------------------- DRA claims
RCT = {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate",
       "metadata": {"name": "two-gpus", "namespace": "ml"},
       "spec": {"spec": {"devices": {"requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com", "count": 2}]}}}}


def claim_pod(ref: dict) -> dict:
    return pod([{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
               resourceClaims=[{"name": "gpu", **ref}])


def test_a_claim_template_counts_its_devices_and_sizes_the_container():
    view = view_of(claim_pod({"resourceClaimTemplateName": "two-gpus"}), StaticClaims([RCT]))
    template = view.templates[0]
    assert view.total_gpus == 2 and view.gpus_by_resource() == {"gpu.nvidia.com": 2}
    assert template.profiles[0].name == "nvidia-gpu-dra"
    assert template.containers[0].companion_size().cpu == Decimal(16)  # 2 whole GPUs' worth


def test_a_shared_claim_and_allocation_mode_all():
    claim = {"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim",
             "metadata": {"name": "all", "namespace": "ml"},
             "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                        "allocationMode": "All"}}]}}}
    view = view_of(claim_pod({"resourceClaimName": "all"}), StaticClaims([claim]))
    assert view.total_gpus == 8  # the profile's maxPerNode


def test_device_requests_in_every_served_shape():
    v1beta1 = {"devices": {"requests": [{"name": "a", "deviceClassName": "gpu.nvidia.com", "count": 3}]}}
    v1 = {"devices": {"requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 3}}]}}
    first = {"devices": {"requests": [{"name": "a", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.nvidia.com", "count": 4},
        {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 1}]}]}}
    admin = {"devices": {"requests": [{"name": "a", "deviceClassName": "gpu.nvidia.com", "adminAccess": True}]}}
    assert [r.count for r in device_requests(v1beta1)] == [3] == [r.count for r in device_requests(v1)]
    (alternatives,) = device_requests(first)
    assert [(r.device_class, r.count) for r in alternatives.alternatives] == [("gpu.nvidia.com", 4),
                                                                               ("mig.nvidia.com", 1)]
    assert device_requests(admin) == [] and device_requests(None) == []


def test_a_class_no_profile_names_counts_nothing():
    nic = {**RCT, "spec": {"spec": {"devices": {"requests": [{"name": "n", "deviceClassName": "nic.example.com"}]}}}}
    view = view_of(claim_pod({"resourceClaimTemplateName": "two-gpus"}), StaticClaims([nic]))
    assert view.total_gpus == 0 and view.templates[0].unresolved_claims == []


def test_an_unresolvable_claim_is_refused_saying_what_to_do():
    engine = Engine(CONFIG, claims=StaticClaims([], origin="the test input"))  # shipped default: closed
    decision = engine.evaluate(claim_pod({"resourceClaimTemplateName": "missing"}))
    assert not decision.allowed and decision.error is not None
    assert decision.error.startswith("spec.resourceClaims[0]: ResourceClaimTemplate missing could not be resolved "
                                     "(it is not in the test input)")
    assert "create the claim (template) first" in decision.error


def test_an_unresolvable_claim_is_a_warning_never_a_silent_zero_under_failure_mode_open():
    opened = parse_config_text("kind: GpuguardConfig\nfailureMode: open\n")
    decision = Engine(opened, claims=StaticClaims([], origin="the test input")).evaluate(
        claim_pod({"resourceClaimTemplateName": "missing"}))
    assert decision.allowed and decision.error is None
    (warning,) = [v for v in decision.violations if v.policy == "gpu-request-shape"]
    assert warning.verdict == "warn" and warning.path == "spec.resourceClaims[0]"
    assert "ResourceClaimTemplate missing could not be resolved (it is not in the test input)" in warning.message


def test_a_trusted_controllers_pod_is_not_refused_for_an_unresolvable_claim():
    from gpuguard.webhook.decision import RequestContext

    obj = claim_pod({"resourceClaimTemplateName": "missing"})
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u",
                                           "controller": True}]
    ctx = RequestContext(namespace="ml", username="system:serviceaccount:kube-system:replicaset-controller")
    decision = Engine(CONFIG, claims=StaticClaims([])).evaluate(obj, ctx)
    assert decision.allowed and decision.error is None


def test_first_available_counts_its_largest_alternative():
    small_first = {**RCT, "spec": {"spec": {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
        {"name": "nic", "deviceClassName": "nic.example.com", "count": 16},
        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8}]}]}}}}
    view = view_of(claim_pod({"resourceClaimTemplateName": "two-gpus"}), StaticClaims([small_first]))
    assert view.total_gpus == 8 and view.gpus_by_resource() == {"gpu.nvidia.com": 8}
    over = {**RCT, "spec": {"spec": {"devices": {"requests": [{"name": "g", "firstAvailable": [
        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
        {"name": "nine", "deviceClassName": "gpu.nvidia.com", "count": 9}]}]}}}}
    engine = Engine(CONFIG, claims=StaticClaims([over]))
    decision = engine.evaluate(claim_pod({"resourceClaimTemplateName": "two-gpus"}))
    assert any("a pod asks for 9 gpu.nvidia.com" in v.message for v in decision.denials)


def test_a_dra_pod_over_the_node_cap_is_denied_and_gets_tolerations():
    big = {**RCT, "spec": {"spec": {"devices": {"requests": [{"name": "g", "deviceClassName": "gpu.nvidia.com",
                                                              "count": 9}]}}}}
    engine = Engine(CONFIG, claims=StaticClaims([big]))
    decision = engine.evaluate(claim_pod({"resourceClaimTemplateName": "two-gpus"}))
    assert not decision.allowed
    assert any("at most 8" in v.message for v in decision.denials)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in decision.mutated["spec"][
        "tolerations"]
    assert "affinity" not in decision.mutated["spec"]  # DRA places the pod: no node label


# ---------------------------------------------------------------- pod-level resources and /dev/shm
def test_pod_level_resources_get_no_container_cpu_or_memory():
    obj = pod([ctr("c", 1)], resources={"limits": {"cpu": "8", "memory": "64Gi"}})
    decision = Engine(CONFIG).evaluate(obj)
    res = decision.mutated["spec"]["containers"][0]["resources"]
    assert "cpu" not in res.get("requests", {}) and "memory" not in res.get("limits", {})
    assert "gpu-memory-guard" not in {v.policy for v in decision.violations}


def test_kuberay_templates_keep_their_own_dev_shm():
    ray = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"headGroupSpec": {"template": {"spec": {"containers": [ctr("head", 1)]}}}}}
    decision = Engine(CONFIG).evaluate(ray)
    assert "shm-volume" not in decision.mutated_by
    assert "volumes" not in decision.mutated["spec"]["headGroupSpec"]["template"]["spec"]


def test_explain_shm_volume_says_kuberay_is_left_alone():
    from gpuguard.policies import REGISTRY

    assert "KubeRay" in REGISTRY["shm-volume"].description


# ---------------------------------------------------------------- the CLI shells resolve claims from their input
def test_evaluate_and_audit_resolve_claims_from_the_same_file(tmp_path):
    import json
    import subprocess
    import sys

    root = REPO
    example = root / "examples" / "dra-gpu-pod.yaml"
    evaluate = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "evaluate", str(example), "--format", "json"],
                              capture_output=True, text=True, cwd=root, timeout=60)
    (template, pod_result) = json.loads(evaluate.stdout)
    assert pod_result["kind"] == "Pod" and pod_result["gpusByResource"] == {"gpu.nvidia.com": 2}
    audit = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(example), "--format", "json"],
                           capture_output=True, text=True, cwd=root, timeout=60)
    results = {r["kind"]: r for r in json.loads(audit.stdout)["results"]}
    assert results["Pod"]["gpus"] == 2
    # alone, the pod's claim can't be resolved: it can't be judged, never a silent zero
    only_pod = tmp_path / "pod.yaml"
    only_pod.write_text(example.read_text().split("---\n", 1)[1])
    audit = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(only_pod), "--format", "json"],
                           capture_output=True, text=True, cwd=root, timeout=60)
    (result,) = json.loads(audit.stdout)["results"]
    # reported as what the input lacks: a not-fully-checked finding, not an engine error (exit 1, not 2)
    (finding,) = result["violations"]
    assert result["allowed"] is False and finding["policy"] == "not-fully-checked"
    assert "it is not in the audited files" in finding["message"] and audit.returncode == 1


@pytest.mark.parametrize("device_class,profile,cpu_per_device", [
    ("gpu.nvidia.com", "nvidia-gpu-dra", Decimal(8)), ("mig.nvidia.com", "nvidia-mig-dra", Decimal("1.142856")),
    ("gpu.intel.com", "intel-gpu", Decimal(4)), ("neuron.aws.com", "neuron-device", Decimal(3)),
])
def test_every_shipped_device_class_has_its_profile_and_sizing(device_class, profile, cpu_per_device):
    rct = {**RCT, "spec": {"spec": {"devices": {"requests": [{"name": "d", "deviceClassName": device_class}]}}}}
    template = view_of(claim_pod({"resourceClaimTemplateName": "two-gpus"}), StaticClaims([rct])).templates[0]
    assert template.profiles[0].name == profile and template.gpus_per_pod == 1
    assert template.containers[0].companion_size().cpu == cpu_per_device
