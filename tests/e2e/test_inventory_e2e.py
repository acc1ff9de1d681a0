"""The node inventory behind a real kube-apiserver: gpuguard watches the Nodes and decides from them.

Node objects are created with the providers' documented labels and taints, their
``status.allocatable`` set through the status subresource (no kubelet runs here), and workloads
are applied as the ordinary user ``alice``: a GPU pod gets the label the GKE nodes carry and no
NVIDIA one, a pod asking more GPUs than the largest node is denied naming it, a PyTorchJob whose
pods must run together and ask more GPUs than the cluster has is denied at apply, and a larger
node lets the same manifest through within seconds, with no restart.  A GPU DaemonSet is denied
outside the namespaces the config allows, and inside them its total is its pod's GPUs times the
nodes it can land on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import yaml

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer, gpuguard

pytestmark = pytest.mark.e2e
USER = "alice"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _node(name: str, labels: dict, allocatable: dict, taints: list | None = None) -> tuple[dict, dict]:
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}}, "spec": {"taints": taints or []}}
    return obj, {"status": {"capacity": allocatable, "allocatable": allocatable}}


GKE_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
NODES = [
    # GKE: the default pool, a g2-standard-24 (2x L4) and an a3-highgpu-8g (8x H100), GKE's driver install
    _node("gke-default-0", {"cloud.google.com/gke-nodepool": "default-pool",
                            "node.kubernetes.io/instance-type": "e2-standard-8"},
          {"cpu": "7910m", "memory": "28Gi", "pods": "110"}),
    _node("gke-l4-0", {"cloud.google.com/gke-nodepool": "l4-pool", "cloud.google.com/gke-accelerator": "nvidia-l4",
                       "node.kubernetes.io/instance-type": "g2-standard-24"},
          {"cpu": "23830m", "memory": "87Gi", "pods": "110", "nvidia.com/gpu": "2"}, GKE_TAINT),
    _node("gke-h100-0", {"cloud.google.com/gke-nodepool": "h100-pool",
                         "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                         "node.kubernetes.io/instance-type": "a3-highgpu-8g"},
          {"cpu": "207", "memory": "1830Gi", "pods": "110", "nvidia.com/gpu": "8"}, GKE_TAINT),
    # EKS with Karpenter: a trn1.32xlarge (16 Neuron devices), a second provider's shape
    _node("ip-10-0-3-7", {"karpenter.sh/nodepool": "neuron", "node.kubernetes.io/instance-type": "trn1.32xlarge",
                          "karpenter.k8s.aws/instance-family": "trn1"},
          {"cpu": "127", "memory": "480Gi", "pods": "110", "aws.amazon.com/neuron": "16"},
          [{"key": "aws.amazon.com/neuron", "effect": "NoSchedule"}]),
]
# GPU DaemonSets are allowed only in these namespaces (gpu-request-shape's daemonSetNamespaces).
DS_NAMESPACES = "inv-ds-*"
# A DGX-2-class node (16 GPUs) with NVIDIA's GPU Operator: added during the test.
LARGER = _node("dgx2-0", {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "Tesla-V100-SXM3-32GB",
                          "nvidia.com/gpu.count": "16"},
               {"cpu": "94", "memory": "1400Gi", "pods": "110", "nvidia.com/gpu": "16"})


def _add(cp: ControlPlane, node: tuple[dict, dict]) -> None:
    obj, status = node
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    cp.kubectl("patch", "node", obj["metadata"]["name"], "--subresource=status", "--type=merge",
               "-p", json.dumps(status))


def pod(ns: str, name: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "cuda", "image": "ghcr.io/example/app:1",
                                                               "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ControlPlane]:
    require_control_plane()
    with ControlPlane() as cp:
        cp.install_crds("pytorchjob")
        for node in NODES:
            _add(cp, node)
        # Bare pods are training work; these tests are about nodes, not checkpoints.
        config = DEFAULT_CONFIG.read_text().replace("  checkpoint-volume:\n    action: enforce",
                                                    "  checkpoint-volume:\n    action: \"off\"")
        assert "action: \"off\"" in config
        config = config.replace("    # daemonSetNamespaces: []", f"    daemonSetNamespaces: [{DS_NAMESPACES}]")
        assert DS_NAMESPACES in config
        server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-nodes"), config, kubeconfig=cp.kubeconfig,
                                extra_args=("--node-inventory",))
        server.start()
        try:
            cp.kubectl("apply", "-f", str(DEFAULT_CONFIG.parent.parent / "deploy" / "base" / "priorityclasses.yaml"))
            server.register(cp)
            ns = namespace(cp)
            cp.wait_for(lambda: _denied(cp, pod(ns, "probe", 16)) is not None, timeout=60, interval=1,
                        message="gpuguard webhooks in force with the nodes")
            yield cp
        finally:
            server.stop()
            print(f"\n[e2e] gpuguard log: {server.log}")


def namespace(cp: ControlPlane) -> str:
    ns = f"inv-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    return ns


def _apply(cp: ControlPlane, obj: dict, *extra: str):
    return cp.kubectl(f"--as={USER}", "apply", *extra, "-f", "-", input=yaml.safe_dump(obj), check=False)


def _denied(cp: ControlPlane, obj: dict) -> str | None:
    result = _apply(cp, obj, "--dry-run=server")
    return result.stderr if result.returncode != 0 and "[schedulable]" in result.stderr else None


def test_a_gke_gpu_pod_gets_the_gke_label_and_no_nvidia_one(cluster):
    cp = cluster
    ns = namespace(cp)
    result = _apply(cp, pod(ns, "cuda", 1))
    assert result.returncode == 0, result.stderr
    spec = cp.kubectl_json("get", "pod", "cuda", "-n", ns)["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "In",
                                            "values": ["nvidia-h100-80gb", "nvidia-l4"]}]}]
    assert "nvidia.com/gpu.present" not in json.dumps(spec)
    assert GPU_TOLERATION in spec["tolerations"]


def test_a_pod_larger_than_every_node_is_denied_until_a_larger_node_joins(cluster):
    cp = cluster
    ns = namespace(cp)
    big = pod(ns, "big", 16)
    result = _apply(cp, big)
    assert result.returncode != 0
    assert "[schedulable]" in result.stderr
    assert "asks 16 nvidia.com/gpu per pod; the largest eligible node has 8 (nvidia-h100-80gb, 1 node)" \
        in result.stderr
    # a Neuron pod is judged against the Neuron node, not the GPU nodes
    neuron = {**pod(ns, "neuron", 1), "spec": {"restartPolicy": "Never", "containers": [{
        "name": "neuron", "image": "ghcr.io/example/app:1", "resources": {"limits": {"aws.amazon.com/neuron": 32}}}]}}
    assert "the largest eligible node has 16 (trn1.32xlarge, 1 node)" in _apply(cp, neuron).stderr

    _add(cp, LARGER)
    last: list[str] = []

    def admitted() -> bool:
        result = _apply(cp, big)
        last[:] = [result.stderr]
        return result.returncode == 0

    cp.wait_for(admitted, timeout=20, interval=0.5,
                message="the 16-GPU pod admitted once the 16-GPU node is in the inventory")
    assert not last or "denied" not in last[0], last
    assert cp.kubectl_json("get", "pod", "big", "-n", ns)["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == "16"
    # `audit --cluster` reads the same nodes: without them the profile's cap (8 per node) would deny the
    # stored 16-GPU pod.  (The audit runs the shipped config, where checkpoint-volume is on.)
    audit = gpuguard("audit", "--cluster", "-n", ns, "--kubeconfig", str(cp.kubeconfig), "--format", "json",
                     check=False)
    (entry,) = [r for r in json.loads(audit.stdout)["results"] if r["kind"] == "Pod"]
    assert [v["policy"] for v in entry["violations"]] == ["checkpoint-volume"], entry["violations"]


def pytorchjob(ns: str, workers: int, gpus: int) -> dict:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/example/train:1",
                                         "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp", "namespace": ns},
            "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": workers + 1}},
                     "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": workers, "template": template}}}}


def test_a_gang_larger_than_the_cluster_is_denied_at_apply(cluster):
    cp = cluster
    ns = f"inv-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    # PyTorchJobs are not in the aggregated edit role: alice administers her namespace.
    cp.kubectl("create", "rolebinding", "alice-admin", "--clusterrole=cluster-admin", f"--user={USER}", "-n", ns)
    # 1 master + 4 workers x 8 GPUs = 40; the nodes with nvidia.com/gpu have 2 + 8 (+ 16 once the
    # DGX-2-class node joins) = at most 26, and at most 3 whole 8-GPU pods
    result = _apply(cp, pytorchjob(ns, 4, 8))
    assert result.returncode != 0
    # counted in whole 8-GPU pods per node: the H100 node holds 1, the DGX-2-class node 2, the 2-GPU node none
    assert "[schedulable]" in result.stderr and "its 5 pods must run together" in result.stderr
    assert "it can never start whole" in result.stderr
    fits = _apply(cp, pytorchjob(ns, 0, 8))  # one pod of 8: fits the H100 node
    assert fits.returncode == 0, fits.stderr


# Nine a3-highgpu-8g nodes (8 H100s each) in a pool of their own, tainted so that only pods
# tolerating the pool land there: the other tests' pods can't, so their decisions don't change.
DS_TAINT = [*GKE_TAINT, {"key": "example.com/agents", "value": "only", "effect": "NoSchedule"}]
DS_NODES = [_node(f"gke-agents-{i}", {"cloud.google.com/gke-nodepool": "agents-pool",
                                      "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
                                      "node.kubernetes.io/instance-type": "a3-highgpu-8g"},
                  {"cpu": "207", "memory": "1830Gi", "pods": "110", "nvidia.com/gpu": "8"}, DS_TAINT)
            for i in range(9)]


def daemonset(ns: str, gpus: int) -> dict:
    labels = {"app": "gpu-agent"}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "gpu-agent", "namespace": ns},
            "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "nodeSelector": {"cloud.google.com/gke-nodepool": "agents-pool"},
                "tolerations": [{"key": "example.com/agents", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "agent", "image": "ghcr.io/example/agent:1",
                                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}


def test_a_gpu_daemonsets_total_counts_its_nodes(cluster):
    cp = cluster
    outside = namespace(cp)  # inv-…: not in daemonSetNamespaces
    denied = _apply(cp, daemonset(outside, 1))
    assert denied.returncode != 0
    assert "[gpu-request-shape]" in denied.stderr and f"namespace {outside} is not one where that is allowed" \
        in denied.stderr and "daemonSetNamespaces" in denied.stderr, denied.stderr

    ns = f"inv-ds-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    try:
        for node in DS_NODES:
            _add(cp, node)
        over = daemonset(ns, 8)  # 8 GPUs on each of the 9 pool nodes: 72, over the 64 per workload
        last: list[str] = []

        def counted() -> bool:
            result = _apply(cp, over, "--dry-run=server")
            last[:] = [result.stderr]
            return "on each of the 9 nodes" in result.stderr

        cp.wait_for(counted, timeout=20, interval=0.5, message="the nine pool nodes in the inventory")
        assert "[gpu-request-shape]" in last[0]
        assert "one pod on each of the 9 nodes it can land on asks for 72 accelerators in all, over the limit " \
               "of 64 per workload" in last[0], last[0]
        within = _apply(cp, daemonset(ns, 7))  # 7 x 9 = 63
        assert within.returncode == 0, within.stderr
        assert cp.kubectl_json("get", "daemonset", "gpu-agent", "-n", ns)["spec"]["template"]["spec"][
            "containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "7"
    finally:
        cp.kubectl("delete", "node", *(obj["metadata"]["name"] for obj, _ in DS_NODES), "--wait=false", check=False)
