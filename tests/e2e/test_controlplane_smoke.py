"""Smoke test of the e2e harness itself: the real control plane starts, takes CRDs, and runs Jobs.

If this fails, every other e2e failure is suspect, so it checks the pieces the webhook tests rely
on: kubectl reaches the apiserver, our CRDs become usable, and kube-controller-manager turns a Job
into a Pod (admission webhooks see those Pods too).
"""

from __future__ import annotations

import json

import pytest

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import control_plane  # noqa: F401 - pytest fixture

pytestmark = pytest.mark.e2e

JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: smoke
  namespace: smoke
spec:
  backoffLimit: 0
  ttlSecondsAfterFinished: 600
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: main
          image: busybox:1.36
          command: ["true"]
"""

PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: smoke-ptj
  namespace: smoke
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: pytorch/pytorch:2.4.0
"""


def test_version_and_readyz(control_plane: ControlPlane) -> None:  # noqa: F811
    out = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"].startswith("v1.")
    assert control_plane.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"


def test_crds_job_creates_pod(control_plane: ControlPlane) -> None:  # noqa: F811
    cp = control_plane
    cp.install_crds("pytorchjob", "jobset")
    cp.kubectl("create", "namespace", "smoke")

    cp.kubectl("apply", "-f", "-", input=PYTORCHJOB)
    stored = cp.kubectl_json("get", "pytorchjob", "smoke-ptj", "-n", "smoke")
    assert stored["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] == 1
    assert "jobsets" in cp.kubectl("api-resources", "--api-group=jobset.x-k8s.io", "-o", "name").stdout

    cp.kubectl("apply", "-f", "-", input=JOB)

    def job_pods() -> list[dict]:
        pods = cp.kubectl_json("get", "pods", "-n", "smoke", "-l", "batch.kubernetes.io/job-name=smoke")
        return pods["items"]

    pods = cp.wait_for(job_pods, timeout=60, interval=1, message="the Job controller to create a Pod")
    assert len(pods) == 1
    pod = pods[0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert pod["status"].get("phase") == "Pending"  # no scheduler or kubelet: stays Pending
    assert pod["spec"]["containers"][0]["image"] == "busybox:1.36"


def test_a_port_taken_before_etcd_binds_it_starts_the_control_plane_again(tmp_path, monkeypatch):
    """free_port() can only pick a port free *now*; another process may take it before etcd binds it.
    The harness starts again on new ports instead of failing every test of the module."""
    import socket

    from tests.support.cluster import controlplane

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    real_free_port = controlplane.free_port
    picks = iter([taken.getsockname()[1]])
    monkeypatch.setattr(controlplane, "free_port", lambda: next(picks, None) or real_free_port())
    try:
        with ControlPlane(tmp_path / "cp", controller_manager=False, verbose=False) as cp:
            assert cp.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
            assert str(taken.getsockname()[1]) not in cp.etcd_url
    finally:
        taken.close()
