"""NVIDIA KAI Scheduler: GPU shares by annotation, and the workloads KAI gangs by itself.

A ``gpu-fraction`` or ``gpu-memory`` annotation holds part of a GPU without any resource request:
counted as nothing it would pass every cap and get no GPU toleration.  KAI's pod grouper gangs the
distributed kinds it knows (a PodGroup of all replicas), so its own PyTorchJob sample must not be
refused by gang-scheduling, while a plain Job under KAI is a PodGroup of one.
"""

from __future__ import annotations

import pytest

from gpuguard.webhook.decision import RequestContext
from gpuguard.workloads.accelerators import kai_share
from tests.support.engines import engine_with, only

ENGINE = engine_with()
GANG = only("gang-scheduling")


def _pod(annotations: dict, containers: list[str] = ("main",), **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "share", "namespace": "ml", "annotations": annotations},
            "spec": {"schedulerName": "kai-scheduler",
                     "containers": [{"name": n, "image": "ubuntu"} for n in containers], **spec}}


@pytest.mark.parametrize(("annotations", "share"), [
    ({}, None),
    ({"gpu-fraction": "0.5"}, (1, None)),
    ({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}, (2, None)),
    ({"gpu-memory": "2000"}, (1, None)),
    ({"gpu-memory": "2000", "gpu-fraction-num-devices": "3"}, (1, None)),  # devices go with fractions only
    ({"gpu-fraction": "half"}, (1, None)),  # unreadable: still a GPU share
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "0"}, (1, None)),
    ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-workload"}, (1, "gpu-workload")),
    ({"other": "1"}, None),
])
def test_share_from_annotations(annotations, share):
    assert kai_share(annotations) == share


def test_a_share_counts_as_devices_of_its_profile_on_the_container_kai_gives_it_to():
    decision = ENGINE.evaluate(_pod({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "2",
                                     "gpu-fraction-container-name": "gpu-workload"}, ["sidecar", "gpu-workload"]),
                               RequestContext(namespace="ml", validate=False))
    assert decision.gpus == 2 and decision.gpus_by_resource == {"kai.scheduler/gpu-sharing": 2}
    sidecar, worker = decision.mutated["spec"]["containers"]
    assert sidecar["resources"]["requests"]["cpu"] == "500m"  # flat: it holds no share
    # The holder is sized as 2 shares of a quarter of a GPU's companion CPU and memory.
    assert worker["resources"]["limits"]["memory"] == "32Gi" and worker["resources"]["requests"]["cpu"] == "4"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in \
        decision.mutated["spec"]["tolerations"]


def test_without_a_share_or_with_the_profile_disabled_nothing_is_counted():
    assert ENGINE.evaluate(_pod({}), RequestContext(namespace="ml")).gpus == 0
    off = engine_with(extra="accelerators:\n  - {name: kai-gpu-share, disabled: true}\n")
    assert off.evaluate(_pod({"gpu-fraction": "0.5"}), RequestContext(namespace="ml")).gpus == 0


def test_shares_add_up_to_the_workload_total():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ml"},
                  "spec": {"replicas": 65, "selector": {}, "template": {
                      "metadata": {"annotations": {"gpu-fraction": "0.1"}},
                      "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "m", "image": "x"}]}}}}
    decision = only("gpu-request-shape").evaluate(deployment, RequestContext(namespace="ml"))
    assert decision.gpus == 65 and not decision.allowed


def _replicas(kind: str, scheduler: str | None, annotations: dict | None = None) -> dict:
    spec = {"containers": [{"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    meta = {"name": "j", "namespace": "ml", "annotations": annotations or {}}
    if kind == "PyTorchJob":
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta, "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": spec}},
                                    "Worker": {"replicas": 3, "template": {"spec": spec}}}}}
    if kind == "JobSet":
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta, "spec": {
            "replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": 4, "completions": 4, "template": {"spec": spec}}}}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": 4, "completions": 4, "template": {"spec": spec}}}


@pytest.mark.parametrize(("kind", "scheduler", "annotations", "ganged"), [
    ("PyTorchJob", "kai-scheduler", None, True),  # KAI's own sample shape
    ("JobSet", "kai-scheduler", None, True),
    ("PyTorchJob", None, None, False),
    ("PyTorchJob", "default-scheduler", None, False),
    ("Job", "kai-scheduler", None, False),  # a plain Job is a PodGroup of one under KAI
    ("Job", "kai-scheduler", {"kai.scheduler/batch-min-member": "4"}, True),
    ("Job", "kai-scheduler", {"kai.scheduler/batch-min-member": "2"}, False),  # fewer than its 4 GPU pods
    ("Job", None, {"kai.scheduler/batch-min-member": "4"}, False),  # the annotation means nothing to others
])
def test_kai_gangs_what_its_pod_grouper_gangs(kind, scheduler, annotations, ganged):
    decision = GANG.evaluate(_replicas(kind, scheduler, annotations), RequestContext(namespace="ml"))
    assert ("gang-scheduling" not in {v.policy for v in decision.denials}) is ganged


def test_one_template_on_another_scheduler_is_not_ganged_by_kai():
    job = _replicas("PyTorchJob", "kai-scheduler")
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"]
    decision = GANG.evaluate(job, RequestContext(namespace="ml"))
    assert "gang-scheduling" in {v.policy for v in decision.denials}
