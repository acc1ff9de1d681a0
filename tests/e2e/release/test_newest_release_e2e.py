"""What the newest release in the e2e matrix changes for GPU admission, through its real control plane.

Collected only when the suite runs against Kubernetes 1.36 or later (``K8S_VERSION``; ``scripts/test.sh`` runs this
directory with the newest release it builds, ``tests/e2e/conftest.py`` leaves it out of a run on an older one):

- **the in-tree gang** (KEP-4671, alpha: ``GenericWorkload``, ``GangScheduling`` and the Job controller's
  ``WorkloadWithJob`` gates; ``scheduling.k8s.io/v1alpha2``): an Indexed Job whose parallelism equals its completions
  is admitted where the admin says the Job controller gangs it (``jobControllerGangs``), and the real
  kube-controller-manager then makes its Workload and PodGroup and kube-scheduler places its pods whole; a Job the
  controller would not gang is denied saying why; a Job naming its own PodGroup (``spec.schedulingGroup``) is
  ganged; a gang the nodes can't hold whole is denied (``schedulable``), as for any gang;
- **DRA extended resources** (KEP-5004, beta and on by default in 1.36; ``resource.k8s.io/v1``): nodes that
  advertise no ``example.com/accel`` at all, whose devices only a DRA driver publishes in ResourceSlices, with a
  DeviceClass mapping that name: a pod asking more than any node's slices publish is denied as never schedulable,
  one that fits is admitted and kube-scheduler places it on those devices.

gpuguard runs with ``--node-inventory --dra-claims`` as its own ServiceAccount (deploy/base's RBAC); workloads are
applied as the ordinary user ``alice`` with the ``edit`` role in a fresh namespace.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cluster.controlplane import K8S_VERSION, ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer, server_identity

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[3]
USER = "alice"
GATES = {"GenericWorkload": True, "GangScheduling": True, "WorkloadWithJob": True}
RUNTIME_CONFIG = ["scheduling.k8s.io/v1alpha2=true"]
DRIVER = "accel.example.com"
EXTENDED = "example.com/accel"
DRA = "resource.k8s.io/v1"


def _job(ns: str, name: str, pods: int, *, mode: str = "Indexed", completions: int | None = None,
         group: str | None = None) -> dict:
    spec: dict = {"restartPolicy": "Never",
                  "containers": [{"name": "trainer", "image": "registry.example/llm/pretrain:3.1",
                                  "command": ["python", "-m", "pretrain.launch", "--nodes", str(pods)],
                                  "resources": {"limits": {"nvidia.com/gpu": "4", "cpu": "8", "memory": "64Gi"}}}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"completionMode": mode, "parallelism": pods,
                     "completions": pods if completions is None else completions,
                     "template": {"spec": spec}}}


def _accel_pod(ns: str, name: str, devices: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never",
                     "containers": [{"name": "bench", "image": "registry.example/accel/bench:5",
                                     "command": ["accel-bench", "--all-devices"],
                                     "resources": {"limits": {EXTENDED: str(devices), "cpu": "4",
                                                              "memory": "16Gi"}}}]}}


def _slice(node: str, devices: int) -> dict:
    return {"apiVersion": DRA, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"accel-{d}", "attributes": {"model": {"string": "A-7"}}}
                                 for d in range(devices)]}}


def _apply(cp: ControlPlane, obj: dict, *extra: str):
    return cp.kubectl(f"--as={USER}", "apply", *extra, "-f", "-", input=yaml.safe_dump(obj), check=False)


def _config() -> str:
    """The shipped default, with the admin's word that the Job controller gangs (its gate is on here); the Jobs
    here are about gangs, not checkpoints."""
    text = DEFAULT_CONFIG.read_text()
    gangs = text.replace("  gang-scheduling:\n    action: enforce\n",
                         "  gang-scheduling:\n    action: enforce\n    jobControllerGangs: true\n")
    out = gangs.replace("  checkpoint-volume:\n    action: enforce", "  checkpoint-volume:\n    action: \"off\"")
    assert out.count("jobControllerGangs: true") == 1 and "action: \"off\"" in out
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ControlPlane, str]]:
    require_control_plane()
    workdir = tmp_path_factory.mktemp("gpuguard-newest-release")
    with ControlPlane(feature_gates=GATES, runtime_config=RUNTIME_CONFIG, scheduler=True) as cp:
        # Nodes that list no ephemeral-storage (no kubelet reports it here): kube-scheduler finds any request of it
        # "Insufficient", so gpuguard's sizing must set none (a default must never be why a pod pends).
        for i in range(2):  # two 4-GPU nodes (the device plugin's extended resource)
            cp.add_node(f"gpu-{i}", labels={"nvidia.com/gpu.product": "NVIDIA-L40S"},
                        allocatable={"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "4"})
        # A node whose 4 accelerators only a DRA driver publishes: no allocatable of them at all.
        cp.add_node("accel-0", allocatable={"cpu": "32", "memory": "256Gi"})
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": DRA, "kind": "DeviceClass", "metadata": {"name": DRIVER},
             "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
                      "extendedResourceName": EXTENDED}}))
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_slice("accel-0", 4)))
        cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
        ns = f"newest-{uuid.uuid4().hex[:8]}"
        cp.kubectl("create", "namespace", ns)
        cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
        server = GpuguardServer(workdir, _config(), kubeconfig=server_identity(cp, workdir),
                                extra_args=("--node-inventory", "--dra-claims", "--nodepool-refresh", "2"))
        server.start()
        try:
            # No --nodes: example.com/accel is in no profile, and the webhook's matchConditions let it through by
            # its structure (a vendor-domain name), so a resource the cluster adds reaches gpuguard unrendered.
            server.register(cp)
            last: list[str] = []

            def in_force() -> bool:  # both the node and the slice inventory read
                result = _apply(cp, _accel_pod(ns, "probe", 8), "--dry-run=server")
                last[:] = [result.stderr or result.stdout]
                return result.returncode != 0 and "[schedulable]" in result.stderr

            try:
                cp.wait_for(in_force, timeout=90, interval=1, message="gpuguard in force with nodes and slices")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}\nthe last answer: {last}") from None
            yield cp, ns
        finally:
            server.stop()
            print(f"\n[e2e] gpuguard log: {server.log}")


def _pods(cp: ControlPlane, ns: str, job: str) -> list[dict]:
    return cp.kubectl_json("get", "pods", "-n", ns, "-l", f"batch.kubernetes.io/job-name={job}", "-o", "json")["items"]


def test_the_control_plane_is_the_newest_release(cluster) -> None:
    cp, _ = cluster
    served = cp.kubectl_json("version", "-o", "json")["serverVersion"]["gitVersion"]
    assert served == K8S_VERSION
    minor = int(K8S_VERSION.split(".")[1])
    assert minor >= 36, K8S_VERSION


def test_a_job_the_job_controller_gangs_is_admitted_and_placed_whole(cluster) -> None:
    cp, ns = cluster
    result = _apply(cp, _job(ns, "pretrain", 2))
    assert result.returncode == 0, result.stderr
    # The premise: kube-controller-manager really makes the gang, and kube-scheduler places the pods together.
    group: list[str] = []

    def ganged_and_placed() -> bool:
        groups = cp.kubectl_json("get", "podgroups.scheduling.k8s.io", "-n", ns, "-o", "json")["items"]
        pods = _pods(cp, ns, "pretrain")
        group[:] = [json.dumps([g["spec"].get("schedulingPolicy") for g in groups])]
        return (len(groups) == 1 and groups[0]["spec"]["schedulingPolicy"].get("gang", {}).get("minCount") == 2
                and len(pods) == 2
                and all((p["spec"].get("schedulingGroup") or {}).get("podGroupName") == groups[0]["metadata"]["name"]
                        for p in pods)
                and all(p["spec"].get("nodeName") for p in pods))

    try:
        cp.wait_for(ganged_and_placed, timeout=120, interval=1,
                    message="the Job controller's PodGroup (minCount 2) and both pods bound")
    except TimeoutError as exc:
        pods = [(p["metadata"]["name"], p["spec"].get("schedulingGroup"), p["spec"].get("nodeName"))
                for p in _pods(cp, ns, "pretrain")]
        raise AssertionError(f"{exc}\npod groups' policies: {group}; pods: {pods}") from None
    nodes = {p["spec"]["nodeName"] for p in _pods(cp, ns, "pretrain")}
    assert nodes == {"gpu-0", "gpu-1"}  # 4 GPUs each: one whole pod per node


def test_a_job_the_job_controller_would_not_gang_is_denied_saying_why(cluster) -> None:
    cp, ns = cluster
    result = _apply(cp, _job(ns, "workers", 2, mode="NonIndexed"))
    assert result.returncode != 0
    assert "[gang-scheduling]" in result.stderr
    assert "the Job controller gangs only an Indexed Job whose parallelism equals its completions: completionMode " \
           "is not Indexed" in result.stderr, result.stderr
    queue = _apply(cp, _job(ns, "shards", 2, completions=8))
    assert queue.returncode != 0 and "completions (8) differ from parallelism (2)" in queue.stderr, queue.stderr


def test_a_job_naming_its_own_pod_group_is_ganged(cluster) -> None:
    cp, ns = cluster
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "eval-gang", "namespace": ns},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    made = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(group), check=False)
    assert made.returncode == 0, made.stderr
    result = _apply(cp, _job(ns, "eval", 2, mode="NonIndexed", group="eval-gang"), "--dry-run=server")
    assert result.returncode == 0, result.stderr


def test_a_gang_the_nodes_cant_hold_whole_is_denied(cluster) -> None:
    cp, ns = cluster
    result = _apply(cp, _job(ns, "too-wide", 3))  # 3 pods x 4 GPUs, two 4-GPU nodes
    assert result.returncode != 0
    assert "[schedulable]" in result.stderr and "its 3 pods must run together" in result.stderr, result.stderr


def test_dra_extended_resources_are_judged_from_the_slices_and_placed_by_the_scheduler(cluster) -> None:
    cp, ns = cluster
    denied = _apply(cp, _accel_pod(ns, "eight", 8))
    assert denied.returncode != 0
    assert "[schedulable]" in denied.stderr and EXTENDED in denied.stderr, denied.stderr
    admitted = _apply(cp, _accel_pod(ns, "four", 4))
    assert admitted.returncode == 0, admitted.stderr
    placed: list[str] = []

    def bound() -> bool:
        pod = cp.kubectl_json("get", "pod", "four", "-n", ns, "-o", "json")
        placed[:] = [json.dumps(pod.get("status", {}).get("conditions"))]
        return pod["spec"].get("nodeName") == "accel-0"

    try:
        cp.wait_for(bound, timeout=120, interval=1, message="the 4-device pod placed on accel-0's DRA devices")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\nits conditions: {placed}") from None


def test_the_namespace_quota_is_judged_for_gangs_and_device_classes(cluster) -> None:
    """namespace-quota with the quotas listed from the cluster (gpuguard's ServiceAccount: ``list`` on them)."""
    cp, _ = cluster
    ns = f"quota-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-accelerators", "namespace": ns},
         "spec": {"hard": {"requests.nvidia.com/gpu": "4", f"{DRIVER}.deviceclass.resource.k8s.io/devices": "2"}}}))
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": DRA, "kind": "ResourceClaimTemplate", "metadata": {"name": "three", "namespace": ns},
         "spec": {"spec": {"devices": {"requests": [
             {"name": "accels", "exactly": {"deviceClassName": DRIVER, "count": 3}}]}}}}))
    gang = _apply(cp, _job(ns, "pretrain", 2), "--dry-run=server")  # ganged by the Job controller, 8 GPUs in all
    assert gang.returncode != 0
    assert "[namespace-quota]" in gang.stderr and "its 2 pods must run together and ask 8 of " \
        "requests.nvidia.com/gpu in all, more than ResourceQuota team-accelerators allows" in gang.stderr, gang.stderr
    alone = _apply(cp, _job(ns, "single", 1), "--dry-run=server")  # one pod of 4: within the quota
    assert alone.returncode == 0, alone.stderr
    claim_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "claims-three", "namespace": ns},
                 "spec": {"restartPolicy": "Never",
                          "resourceClaims": [{"name": "accels", "resourceClaimTemplateName": "three"}],
                          "containers": [{"name": "bench", "image": "registry.example/accel/bench:5",
                                          "resources": {"claims": [{"name": "accels"}],
                                                        "limits": {"cpu": "4", "memory": "16Gi"}}}]}}
    claims = _apply(cp, claim_pod, "--dry-run=server")
    assert claims.returncode != 0
    assert f"asks 3 of {DRIVER}.deviceclass.resource.k8s.io/devices, more than ResourceQuota team-accelerators " \
        "allows" in claims.stderr, claims.stderr
