"""Karpenter NodePools read from a real kube-apiserver: an autoscaled cluster with no GPU node yet.

The cluster has only a CPU node.  gpuguard runs with ``--node-inventory``; until a NodePool exists
it falls back to the accelerator profile (a *preferred* term only).  Once the Karpenter CRD and a
GPU NodePool (an EKS ``g5`` pool, written as Karpenter's documentation shapes one) are created,
the same pod is kept on the nodes that pool would make, by the pool's own label, within seconds
and with no restart; deleting the pool takes it back.  Pods are applied as the ordinary user alice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import yaml

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer

pytestmark = pytest.mark.e2e
USER = "alice"
GPU_POOL = {
    "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu-a10g"},
    "spec": {"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a10g"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
        "limits": {"cpu": "1000", "nvidia.com/gpu": "16"}},
}
CPU_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-0", "labels": {
    "kubernetes.io/hostname": "cpu-0", "node.kubernetes.io/instance-type": "m6i.2xlarge"}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[ControlPlane]:
    require_control_plane()
    with ControlPlane() as cp:
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(CPU_NODE))
        cp.kubectl("patch", "node", "cpu-0", "--subresource=status", "--type=merge", "-p", json.dumps(
            {"status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "allocatable": {"cpu": "7910m", "memory": "30Gi", "pods": "110"}}}))
        config = DEFAULT_CONFIG.read_text().replace("  checkpoint-volume:\n    action: enforce",
                                                    "  checkpoint-volume:\n    action: \"off\"")
        server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-nodepools"), config, kubeconfig=cp.kubeconfig,
                                extra_args=("--node-inventory", "--nodepool-refresh", "1"))
        server.start()
        try:
            cp.kubectl("apply", "-f", str(DEFAULT_CONFIG.parent.parent / "deploy" / "base" / "priorityclasses.yaml"))
            server.register(cp)
            yield cp
        finally:
            server.stop()
            print(f"\n[e2e] gpuguard log: {server.log}")


def _affinity_of_a_gpu_pod(cp: ControlPlane) -> dict:
    ns = f"np-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cuda", "namespace": ns},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "cuda", "image": "ghcr.io/example/app:1",
                                                              "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    result = cp.kubectl(f"--as={USER}", "apply", "--dry-run=server", "-o", "json", "-f", "-",
                        input=yaml.safe_dump(pod), check=False)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["spec"].get("affinity", {}).get("nodeAffinity", {})


def _required_keys(node_affinity: dict) -> set[str]:
    terms = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    return {e["key"] for t in terms for e in t.get("matchExpressions", [])}


def test_a_karpenter_gpu_pool_created_later_steers_gpu_pods_to_its_nodes(cluster):
    cp = cluster
    before = _affinity_of_a_gpu_pod(cp)
    assert not _required_keys(before), "with no GPU node or pool, nothing required may be added"
    assert "nvidia.com/gpu.present" in json.dumps(before.get("preferredDuringSchedulingIgnoredDuringExecution"))

    cp.install_crds("nodepool")
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(GPU_POOL))
    cp.wait_for(lambda: "karpenter.k8s.aws/instance-gpu-name" in _required_keys(_affinity_of_a_gpu_pod(cp)),
                timeout=60, interval=1, message="the NodePool's GPU label required on GPU pods")
    after = _affinity_of_a_gpu_pod(cp)
    terms = after["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a10g"]} in \
        terms[0]["matchExpressions"]
    assert "nvidia.com/gpu.present" not in json.dumps(after)

    cp.kubectl("delete", "nodepool", "gpu-a10g")
    cp.wait_for(lambda: not _required_keys(_affinity_of_a_gpu_pod(cp)), timeout=60, interval=1,
                message="the pool's label dropped once the pool is gone")
