"""Small blast radius, through the real kube-apiserver and kube-controller-manager.

gpuguard's webhook configurations carry matchConditions (``webhook/cli/match_conditions.py``), so
the apiserver calls gpuguard only for objects that can carry accelerators.  With
``failurePolicy: Fail`` and gpuguard's server stopped, a CPU Deployment still gets its
ReplicaSet and pods and a CPU Job its pod, while a GPU pod and a GPU Job are refused; with
the server running, both behave as before (GPU objects mutated and judged, CPU objects
never sent to gpuguard at all).
"""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from tests.support.builders import make
from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, GpuguardServer

pytestmark = pytest.mark.e2e
CPU = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("pytorchjob", "jobset")
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard"), DEFAULT_CONFIG.read_text())
    server.start()
    server.register(cp)
    configured = cp.kubectl_json("get", "mutatingwebhookconfiguration", "gpuguard")
    assert all(h["matchConditions"] for h in configured["webhooks"]), "the apiserver stored no matchConditions"
    cp.wait_for(lambda: _gpu_pod_mutated(cp, _namespace(cp)), timeout=60, message="gpuguard webhooks in force")
    yield cp, server
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


def _namespace(cp) -> str:
    ns = f"br-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    return ns


def _apply(cp, obj: dict):
    return cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)


def cpu_deployment(ns: str, name: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx", "resources": CPU}]}}}}


def cpu_job(ns: str, name: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "etl", "image": "python", "resources": CPU}]}}}}


def gpu_pod(ns: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "trainer", "image": "ghcr.io/example/train:1",
                "env": [{"name": "CHECKPOINT_URI", "value": "s3://team/ckpt"}],
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def gpu_job(ns: str, name: str) -> dict:
    container = {"name": "trainer", "image": "ghcr.io/example/train:1",
                 "resources": {"limits": {"nvidia.com/gpu": 1}},
                 "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container], "volumes": [
                {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}}}}


def _gpu_pod_mutated(cp, ns: str) -> bool:
    if _apply(cp, gpu_pod(ns, "probe")).returncode != 0:
        return False
    pod = cp.kubectl_json("get", "pod", "probe", "-n", ns)
    return any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"].get("tolerations", []))


def _pods(cp, ns: str, selector: str) -> list[dict]:
    return cp.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]


def _cpu_workloads_get_pods(cp, ns: str) -> None:
    assert _apply(cp, cpu_deployment(ns, "web")).returncode == 0
    assert _apply(cp, cpu_job(ns, "etl")).returncode == 0
    deployment_pods = cp.wait_for(lambda: len(_pods(cp, ns, "app=web")) == 2 and _pods(cp, ns, "app=web"),
                                  timeout=90, message="the Deployment's two pods")
    job_pods = cp.wait_for(lambda: _pods(cp, ns, "job-name=etl"), timeout=90, message="the Job's pod")
    for pod in [*deployment_pods, *job_pods]:
        assert "gpuguard.io/mutated-by" not in (pod["metadata"].get("annotations") or {})


def test_running_gpu_objects_are_judged_and_cpu_objects_never_reach_gpuguard(cluster):
    cp, server = cluster
    ns = _namespace(cp)
    _cpu_workloads_get_pods(cp, ns)
    assert server.log_count(f'"namespace":"{ns}"') == 0, "a CPU object was sent to gpuguard"
    assert _apply(cp, gpu_pod(ns, "gpu")).returncode == 0
    stored = cp.kubectl_json("get", "pod", "gpu", "-n", ns)
    assert stored["spec"]["priorityClassName"] == "training-standard"
    assert any(t.get("key") == "nvidia.com/gpu" for t in stored["spec"]["tolerations"])
    assert _apply(cp, gpu_job(ns, "train")).returncode == 0
    job = cp.kubectl_json("get", "job", "train", "-n", ns)
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert server.log_count(f'"namespace":"{ns}"') >= 2


def gpu_deployment(ns: str, name: str, gpus: bool = True) -> dict:
    obj = cpu_deployment(ns, name)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "CHECKPOINT_URI", "value": "s3://team/ckpt"}]
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return obj


def test_stopped_cpu_workloads_still_run_while_gpu_objects_wait(cluster):
    cp, server = cluster
    ns = _namespace(cp)
    created = _apply(cp, gpu_deployment(ns, "serve-gpu"))
    assert created.returncode == 0, created.stderr
    server.stop()
    _cpu_workloads_get_pods(cp, ns)
    # An UPDATE is judged when the new *or the old* object has accelerators: taking the GPU away
    # from a GPU Deployment waits for gpuguard too, while editing a CPU Deployment does not.
    removed = _apply(cp, gpu_deployment(ns, "serve-gpu", gpus=False))
    assert removed.returncode != 0 and "failed calling webhook" in removed.stderr
    scaled_cpu = cpu_deployment(ns, "web")
    scaled_cpu["spec"]["replicas"] = 3
    assert _apply(cp, scaled_cpu).returncode == 0


@pytest.mark.parametrize("kind", ["PyTorchJob", "JobSet"])
def test_stopped_crd_workloads_are_told_apart_by_their_templates(cluster, kind):
    """Map-of-roles (PyTorchJob) and list (JobSet) template paths in the CEL, against the real apiserver."""
    cp, server = cluster
    server.stop()
    ns = _namespace(cp)
    cpu = {"restartPolicy": "Never", "containers": [{"name": "etl", "image": "python", "resources": CPU}]}
    gpu = {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "x",
                                                      "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    created = _apply(cp, make(kind, cpu, name="cpu-only", namespace=ns))
    assert created.returncode == 0, created.stderr
    refused = _apply(cp, make(kind, gpu, name="gpu", namespace=ns))
    assert refused.returncode != 0 and "failed calling webhook" in refused.stderr
    for obj in (gpu_pod(ns, "gpu-while-down"), gpu_job(ns, "train-while-down")):
        refused = _apply(cp, obj)
        assert refused.returncode != 0
        assert "failed calling webhook" in refused.stderr and "gpuguard.io" in refused.stderr
    assert cp.kubectl("get", "pod", "gpu-while-down", "-n", ns, check=False).returncode != 0
    assert cp.kubectl("get", "job", "train-while-down", "-n", ns, check=False).returncode != 0


def cpu_statefulset(ns: str, name: str) -> dict:
    obj = cpu_deployment(ns, name)
    obj["kind"] = "StatefulSet"
    obj["spec"]["serviceName"] = name
    return obj


def _gone(cp, *args: str) -> bool:
    return cp.kubectl("get", *args, check=False).returncode != 0


def test_stopped_scaling_of_cpu_workloads_and_deletions_go_on(cluster):
    """With gpuguard down, kubectl scale (and an HPA) of CPU workloads works, and deletions finish.

    ``kubectl scale`` reaches gpuguard's own ``scale.gpuguard.io`` webhook (failurePolicy Ignore):
    a Scale has no template to filter on.  Deleting a GPU Job and a namespace needs the job
    controller's and garbage collector's finalizer-removing UPDATEs, which the matchConditions keep
    away from gpuguard.
    """
    cp, server = cluster
    server.start()
    server.register(cp)
    ns = _namespace(cp)
    cp.wait_for(lambda: _gpu_pod_mutated(cp, ns), timeout=60, message="gpuguard back in force")
    for obj in (cpu_deployment(ns, "web"), cpu_statefulset(ns, "db"), gpu_job(ns, "train")):
        created = _apply(cp, obj)
        assert created.returncode == 0, created.stderr
    cp.wait_for(lambda: _pods(cp, ns, "job-name=train"), timeout=90, message="the GPU Job's pod")
    server.stop()
    for resource in ("deployment/web", "statefulset/db"):
        scaled = cp.kubectl("scale", resource, "--replicas=3", "-n", ns, check=False)
        assert scaled.returncode == 0, scaled.stderr
    # The HPA's identity reads and updates the scale subresource (its role may get and update */scale only).
    as_hpa = "--as=system:serviceaccount:kube-system:horizontal-pod-autoscaler"
    scale = cp.kubectl_json(as_hpa, "get", "deployment", "web", "--subresource=scale", "-n", ns)
    scale["spec"]["replicas"] = 4
    hpa = cp.kubectl(as_hpa, "replace", "--raw", f"/apis/apps/v1/namespaces/{ns}/deployments/web/scale", "-f", "-",
                     input=json.dumps(scale), check=False)
    assert hpa.returncode == 0, hpa.stderr
    assert cp.kubectl_json("get", "deployment", "web", "-n", ns)["spec"]["replicas"] == 4
    assert cp.kubectl_json("get", "statefulset", "db", "-n", ns)["spec"]["replicas"] == 3

    deleted = cp.kubectl("delete", "job", "train", "-n", ns, "--timeout=20s", check=False)
    assert deleted.returncode == 0, deleted.stderr
    cp.wait_for(lambda: _gone(cp, "job", "train", "-n", ns) and not _pods(cp, ns, "job-name=train"),
                timeout=20, interval=0.5, message="the GPU Job and its pod deleted")
    assert cp.kubectl("delete", "namespace", ns, "--wait=false").returncode == 0
    cp.wait_for(lambda: _gone(cp, "namespace", ns), timeout=20, interval=0.5, message="the namespace deleted")


def test_stopped_controllers_still_create_the_pods_of_judged_gpu_workloads(cluster):
    """A GPU Deployment judged while gpuguard ran keeps its pods coming while gpuguard is down.

    The ReplicaSet controller's Pods of a ReplicaSet (and the Deployment controller's ReplicaSets)
    are left alone by the engine, decided by identity and owner kind; the matchConditions decide it
    by the same two facts, so those creates never reach gpuguard, up or down.
    """
    cp, server = cluster
    server.start()
    server.register(cp)
    ns = _namespace(cp)
    cp.wait_for(lambda: _gpu_pod_mutated(cp, ns), timeout=60, message="gpuguard back in force")
    created = _apply(cp, gpu_deployment(ns, "serve"))
    assert created.returncode == 0, created.stderr
    cp.wait_for(lambda: len(_pods(cp, ns, "app=serve")) == 2, timeout=90, message="the GPU Deployment's two pods")
    reviewed = server.log.read_text(errors="replace")
    assert f'"kind":"Deployment","namespace":"{ns}"' in reviewed, "the user's Deployment is judged"
    assert f'"kind":"ReplicaSet","namespace":"{ns}"' not in reviewed, "the controller's ReplicaSet never reached it"
    assert f'"kind":"Pod","namespace":"{ns}","name":"serve-' not in reviewed, "nor the controller's pods"
    server.stop()
    scaled = cp.kubectl("scale", "deployment/serve", "--replicas=4", "-n", ns, check=False)
    assert scaled.returncode == 0, scaled.stderr
    pods = cp.wait_for(lambda: len(_pods(cp, ns, "app=serve")) == 4 and _pods(cp, ns, "app=serve"), timeout=60,
                       message="the scaled GPU Deployment's new pods, created while gpuguard is down")
    for pod in pods:  # as the judged template says (it was mutated when the Deployment was admitted)
        assert any(t.get("key") == "nvidia.com/gpu" for t in pod["spec"].get("tolerations", []))
    # A user's own GPU pod still waits for gpuguard.
    refused = _apply(cp, gpu_pod(ns, "by-hand"))
    assert refused.returncode != 0 and "failed calling webhook" in refused.stderr
