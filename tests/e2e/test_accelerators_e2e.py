"""Accelerator profiles behind a real kube-apiserver (v1.33 with DRA and pod-level resources on).

Each accelerator pod is created with kubectl and read back from the apiserver: it must carry
exactly its profile's tolerations, node selection and companion requests, and nothing of
another vendor's.  The apiserver here serves ``resource.k8s.io`` (feature gate plus
runtime-config on 1.33) and pod-level ``spec.resources`` (feature gate), and gpuguard runs
with ``--dra-claims``, watching claim templates through the same apiserver.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import yaml

from tests.support.cluster.controlplane import K8S_VERSION, ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer, gpuguard

K8S_MINOR = int(K8S_VERSION.lstrip("v").split(".")[1])
pytestmark = pytest.mark.e2e

GATES = {"DynamicResourceAllocation": True, "PodLevelResources": True}
RUNTIME_CONFIG = ["resource.k8s.io/v1beta1=true", "resource.k8s.io/v1beta2=true"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ControlPlane, GpuguardServer]]:
    require_control_plane()
    with ControlPlane(feature_gates=GATES, runtime_config=RUNTIME_CONFIG) as cp:
        # Bare pods are training work; these tests are about accelerators, not checkpoints.
        config = DEFAULT_CONFIG.read_text().replace("  checkpoint-volume:\n    action: enforce",
                                                    "  checkpoint-volume:\n    action: \"off\"")
        assert "action: \"off\"" in config
        server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-acc"), config, kubeconfig=cp.kubeconfig,
                                extra_args=("--dra-claims",))
        server.start()
        try:
            cp.kubectl("apply", "-f", str(DEFAULT_CONFIG.parent.parent / "deploy" / "base" / "priorityclasses.yaml"))
            server.register(cp)
            cp.wait_for(lambda: _in_force(cp), timeout=60, interval=1, message="gpuguard webhooks in force")
            yield cp, server
        finally:
            server.stop()
            print(f"\n[e2e] gpuguard log: {server.log}")


def _in_force(cp: ControlPlane) -> bool:
    ns = namespace(cp)
    result = cp.kubectl("apply", "--dry-run=server", "-f", "-", check=False,
                        input=yaml.safe_dump(pod(ns, "probe", {"nvidia.com/gpu": 9})))
    return result.returncode != 0 and "gpu-request-shape" in result.stderr


def namespace(cp: ControlPlane) -> str:
    ns = f"acc-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    return ns


def pod(ns: str, name: str, limits: dict | None, **spec) -> dict:
    container: dict = {"name": "main", "image": "ghcr.io/example/app:1"}
    if limits:
        container["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never", "containers": [container], **spec}}


def create(cp: ControlPlane, obj: dict) -> dict:
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    return cp.kubectl_json("get", "pod", obj["metadata"]["name"], "-n", obj["metadata"]["namespace"])


def required_terms(spec: dict) -> list | None:
    return (spec.get("affinity") or {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms")


def preferred_terms(spec: dict) -> list | None:
    """The soft node affinity: without a node inventory, profiles' node selections are preferred, never required."""
    return (spec.get("affinity") or {}).get("nodeAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution")


PROFILES = [
    # (name, limits, toleration key, node selection expression, requests and limits the profile adds)
    ("tpu", {"google.com/tpu": 4}, "google.com/tpu",
     {"key": "cloud.google.com/gke-tpu-accelerator", "operator": "Exists"},
     {"cpu": "80", "memory": "160Gi", "ephemeral-storage": "40Gi"}, {"memory": "160Gi", "ephemeral-storage": "80Gi"}),
    ("amd", {"amd.com/gpu": 1}, "amd.com/gpu",
     {"key": "feature.node.kubernetes.io/amd-gpu", "operator": "In", "values": ["true"]},
     {"cpu": "8", "memory": "64Gi", "ephemeral-storage": "50Gi"}, {"memory": "64Gi", "ephemeral-storage": "100Gi"}),
    # 1g of 7 slices: a seventh of a whole GPU's 8 CPU / 64Gi / 50Gi (limit 2x the request as written)
    ("mig", {"nvidia.com/mig-1g.10gb": 1}, "nvidia.com/gpu",
     {"key": "nvidia.com/mig.strategy", "operator": "In", "values": ["mixed"]},
     {"cpu": "1143m", "memory": "9363Mi", "ephemeral-storage": "7315Mi"},
     {"memory": "9363Mi", "ephemeral-storage": "14630Mi"}),
    # HAMi vGPU with half the cores: half a whole GPU's companion resources
    ("hami", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 4096}, "nvidia.com/gpu",
     {"key": "gpu", "operator": "In", "values": ["on"]},
     {"cpu": "4", "memory": "32Gi", "ephemeral-storage": "25Gi"}, {"memory": "32Gi", "ephemeral-storage": "50Gi"}),
]


@pytest.mark.parametrize("name,limits,toleration,expression,requests,added_limits", PROFILES,
                         ids=[p[0] for p in PROFILES])
def test_accelerator_pod_gets_exactly_its_profiles_mutations(cluster, name, limits, toleration, expression,
                                                              requests, added_limits):
    cp, _ = cluster
    stored = create(cp, pod(namespace(cp), f"{name}-pod", limits))
    spec = stored["spec"]
    assert [t for t in spec["tolerations"] if t.get("effect") == "NoSchedule"] == [
        {"key": toleration, "operator": "Exists", "effect": "NoSchedule"}]
    assert required_terms(spec) is None
    assert preferred_terms(spec) == [{"weight": 100, "preference": {"matchExpressions": [expression]}}]
    resources = spec["containers"][0]["resources"]
    extended = {k: str(v) for k, v in limits.items()}  # the apiserver copies a Pod's limits into requests
    assert resources["requests"] == {**requests, **extended}
    assert resources["limits"] == {**extended, **added_limits}
    mutated_by = stored["metadata"]["annotations"]["gpuguard.io/mutated-by"].split(",")
    assert {"gpu-tolerations", "gpu-node-affinity", "default-resources", "shm-volume"} <= set(mutated_by)


def test_gpu_pod_with_a_sidecar_over_the_node_cap_is_denied(cluster):
    cp, _ = cluster
    sidecar = {"name": "profiler", "image": "ghcr.io/example/prof:1", "restartPolicy": "Always",
               "resources": {"limits": {"nvidia.com/gpu": 8}}}
    obj = pod(namespace(cp), "sidecar-gpus", {"nvidia.com/gpu": 8}, initContainers=[sidecar])
    result = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
    assert result.returncode != 0
    assert "[gpu-request-shape]" in result.stderr
    assert "a pod asks for 16 nvidia.com/gpu (counting sidecars and DRA claims) but a node has at most 8" \
        in result.stderr


def _claim_template(ns: str, name: str, count: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpus", "deviceClassName": "gpu.nvidia.com", "count": count}]}}}}


def _claim_pod(ns: str, name: str, template: str) -> dict:
    obj = pod(ns, name, None, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": template}])
    obj["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    return obj


@pytest.fixture(scope="module")
def dra(cluster) -> tuple[ControlPlane, str]:
    """A GPU DeviceClass and two claim templates (2 and 9 GPUs) that gpuguard's watch has seen."""
    cp, _ = cluster
    ns = namespace(cp)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "resource.k8s.io/v1beta1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
         "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}}))
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_claim_template(ns, "two-gpus", 2)))
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_claim_template(ns, "nine-gpus", 9)))

    # The watch sees new templates within moments; until then gpuguard refuses instead of counting 0 silently.
    def seen() -> bool:
        probe = _claim_pod(ns, "probe", "nine-gpus")
        result = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False)
        return result.returncode != 0 and "at most 8" in result.stderr

    cp.wait_for(seen, timeout=30, interval=1, message="gpuguard's claim watch has the templates")
    return cp, ns


def test_a_dra_gpu_claim_is_counted_and_checked(dra):
    cp, ns = dra
    stored = create(cp, _claim_pod(ns, "two", "two-gpus"))
    spec = stored["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert required_terms(spec) is None  # DRA ResourceSlices place the pod, not a node label
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "16", "memory": "128Gi",
                                                              "ephemeral-storage": "100Gi"}
    assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}]

    denied = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_claim_pod(ns, "too-many", "nine-gpus")),
                        check=False)
    assert denied.returncode != 0
    assert "a pod asks for 9 gpu.nvidia.com (counting sidecars and DRA claims) but a node has at most 8" \
        in denied.stderr

    # A claim nobody can resolve leaves the pod's GPUs unknown: refused (failureMode closed), saying what to do.
    missing = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_claim_pod(ns, "unknown", "no-such-template")),
                         check=False)
    assert missing.returncode != 0
    assert "ResourceClaimTemplate no-such-template could not be resolved" in missing.stderr
    assert "create the claim (template) first" in missing.stderr


def test_a_pod_with_pod_level_resources_is_accepted_within_its_budget(dra):
    cp, ns = dra
    budget = {"requests": {"cpu": "6", "memory": "48Gi"}, "limits": {"cpu": "6", "memory": "48Gi"}}
    obj = _claim_pod(ns, "pod-level", "two-gpus")
    obj["spec"]["resources"] = budget
    stored = create(cp, obj)  # kubectl apply succeeds: the apiserver accepted what gpuguard sent back
    assert stored["spec"]["resources"] == budget
    assert stored["spec"]["containers"][0]["resources"] == {"claims": [{"name": "gpus"}]}  # nothing added
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in stored["spec"]["tolerations"]
    assert stored["status"]["qosClass"] == "Guaranteed"


def test_pod_level_resources_with_an_extended_resource_as_each_release_validates_them(cluster):
    """1.33's pod-level validation wants every container request covered at pod level, and an extended
    resource can't be: the apiserver refuses the user's own GPU request, never anything gpuguard added.  Later
    releases (measured on 1.36) admit the pod: the user's pod-level budget is stored as written."""
    cp, _ = cluster
    budget = {"requests": {"cpu": "6", "memory": "48Gi"}, "limits": {"cpu": "6", "memory": "48Gi"}}
    obj = pod(namespace(cp), "pod-level-gpu", {"nvidia.com/gpu": 1}, resources=budget)
    result = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
    if K8S_MINOR <= 33:
        assert result.returncode != 0 and "spec.resources.requests[nvidia.com/gpu]" in result.stderr
        for added in ("ephemeral-storage", "requests[cpu]", "requests[memory]"):
            assert added not in result.stderr
        return
    assert result.returncode == 0, result.stderr
    stored = cp.kubectl_json("get", "pod", "pod-level-gpu", "-n", obj["metadata"]["namespace"])
    assert stored["spec"]["resources"] == budget
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_audit_cluster_resolves_claims_from_the_cluster(dra):
    cp, ns = dra
    create(cp, _claim_pod(ns, "audited", "two-gpus"))
    report = gpuguard("audit", "--cluster", "--kubeconfig", str(cp.kubeconfig), "-n", ns, "--format", "json",
                      "--fail-on", "never", env=cp.env)
    results = {r["name"]: r for r in json.loads(report.stdout)["results"] if r["kind"] == "Pod"}
    assert results["audited"]["gpus"] == 2
    assert results["audited"]["gpusByResource"] == {"gpu.nvidia.com": 2}
    assert not any("could not be resolved" in v["message"] for v in results["audited"]["violations"])


def test_the_claim_watch_forgets_a_deleted_template(dra):
    cp, ns = dra
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_claim_template(ns, "short-lived", 1)))

    def refused(expect_refusal: bool) -> bool:
        probe = _claim_pod(ns, "probe", "short-lived")
        result = cp.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(probe), check=False)
        unresolved = result.returncode != 0 and "could not be resolved" in result.stderr
        return unresolved if expect_refusal else result.returncode == 0

    cp.wait_for(lambda: refused(False), timeout=30, interval=1, message="the watch has the new template")
    cp.kubectl("delete", "resourceclaimtemplate", "short-lived", "-n", ns)
    cp.wait_for(lambda: refused(True), timeout=30, interval=1, message="the watch forgot the deleted template")
