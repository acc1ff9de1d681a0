"""Builders for every workload kind the engine knows, around one pod spec.

Tests parametrize over ``ALL_KINDS`` so each policy is exercised on each kind, and use
``template_specs`` to find the pod specs back in the engine's output.  The kind lists are
derived from ``workloads.kinds.KINDS`` (its default class, job fields, gang facts), so a new
``KindSpec`` is in every matrix at once; ``test_every_kind_has_a_builder`` fails until it
has a builder here.
"""

from __future__ import annotations

import copy
from typing import Any

from workloads import kinds
from workloads.paths import get_path


def gpu_container(gpus: int = 1, name: str = "trainer", **extra: Any) -> dict:
    container = {"name": name, "image": "ghcr.io/example/train:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    container.update(extra)
    return container


def cpu_container(name: str = "app") -> dict:
    return {"name": name, "image": "nginx:1.27"}


def pvc_pod_spec(gpus: int = 1) -> dict:
    return {
        "restartPolicy": "Never",
        "containers": [gpu_container(gpus, volumeMounts=[{"name": "ckpt", "mountPath": "/checkpoints"}])],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
    }


def bare_pod_spec(gpus: int = 1) -> dict:
    return {"restartPolicy": "Never", "containers": [gpu_container(gpus)]}


def _tmpl(spec: dict) -> dict:
    return {"metadata": {"labels": {"app": "x"}}, "spec": copy.deepcopy(spec)}


def make(kind: str, spec: dict, replicas: int = 1, name: str = "w", namespace: str = "ml") -> dict:
    """A ``kind`` object whose every pod template carries ``spec`` (``replicas`` pods per role)."""
    meta = {"name": name, "namespace": namespace}
    t = _tmpl(spec)
    builders = {
        "Pod": lambda: {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(spec)},
        "Job": lambda: {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                        "spec": {"parallelism": replicas, "template": t}},
        "CronJob": lambda: {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                            "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"parallelism": replicas,
                                                                                       "template": t}}}},
        "Deployment": lambda: {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                                        "template": t}},
        "StatefulSet": lambda: {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
                                "spec": {"replicas": replicas, "serviceName": "x",
                                         "selector": {"matchLabels": {"app": "x"}}, "template": t}},
        "ReplicaSet": lambda: {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta,
                               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "x"}},
                                        "template": t}},
        "DaemonSet": lambda: {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta,
                              "spec": {"selector": {"matchLabels": {"app": "x"}}, "template": t}},
        "PyTorchJob": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                               "spec": {"runPolicy": {}, "pytorchReplicaSpecs": {
                                   "Master": {"replicas": 1, "template": t},
                                   "Worker": {"replicas": replicas, "template": _tmpl(spec)}}}},
        "TFJob": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": meta,
                          "spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas, "template": t}}}},
        "MPIJob": lambda: {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": meta,
                           "spec": {"mpiReplicaSpecs": {"Worker": {"replicas": replicas, "template": t}}}},
        "XGBoostJob": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": meta,
                               "spec": {"xgbReplicaSpecs": {"Master": {"replicas": replicas, "template": t}}}},
        "PaddleJob": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": meta,
                              "spec": {"paddleReplicaSpecs": {"Worker": {"replicas": replicas, "template": t}}}},
        "JAXJob": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": meta,
                           "spec": {"jaxReplicaSpecs": {"Worker": {"replicas": replicas, "template": t}}}},
        "Notebook": lambda: {"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": meta,
                             "spec": {"template": t}},
        "JobSet": lambda: {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                           "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                                        "template": {"spec": {"template": t}}}]}},
        "VolcanoJob": lambda: {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
                               "spec": {"minAvailable": replicas,
                                        "tasks": [{"name": "worker", "replicas": replicas, "template": t}]}},
        "RayJob": lambda: {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta,
                           "spec": {"entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
                                    "rayClusterSpec": {"headGroupSpec": {"template": t},
                                                       "workerGroupSpecs": [{"groupName": "gpu",
                                                                             "replicas": replicas,
                                                                             "template": _tmpl(spec)}]}}},
        "RayCluster": lambda: {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
                               "spec": {"headGroupSpec": {"template": t},
                                        "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas,
                                                              "template": _tmpl(spec)}]}},
        "LeaderWorkerSet": lambda: {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                                    "metadata": meta,
                                    "spec": {"replicas": 1, "leaderWorkerTemplate": {
                                        "size": replicas, "workerTemplate": t}}},
        # Raw deployment: every pod field is allowed (Knative-served predictors: tests/policies/*/kserve*).
        "InferenceService": lambda: {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                                     "metadata": {**meta, "annotations": {
                                         "serving.kserve.io/deploymentMode": "RawDeployment"}},
                                     "spec": {"predictor": copy.deepcopy(spec)}},
        "LLMInferenceService": lambda: {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
                                        "metadata": meta, "spec": {"model": {"uri": "hf://example/model"},
                                                                   "replicas": replicas,
                                                                   "template": copy.deepcopy(spec)}},
        "RayService": lambda: {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta,
                               "spec": {"rayClusterConfig": {"headGroupSpec": {"template": t},
                                                             "workerGroupSpecs": [{"groupName": "gpu",
                                                                                   "replicas": replicas,
                                                                                   "template": _tmpl(spec)}]}}},
        "AppWrapper": lambda: {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper", "metadata": meta,
                               "spec": {"components": [{"podSets": [{"replicas": replicas,
                                                                     "path": "template.spec.template"}],
                                                        "template": {"apiVersion": "batch/v1", "kind": "Job",
                                                                     "metadata": {"name": name},
                                                                     "spec": {"parallelism": replicas,
                                                                              "template": t}}}]}},
        # The pod templates live in the runtime (runtime_for); the TrainJob names it and sizes the nodes.
        "TrainJob": lambda: {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
                             "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": replicas}}},
        "RayCronJob": lambda: {"apiVersion": "ray.io/v1", "kind": "RayCronJob", "metadata": meta,
                               "spec": {"schedule": "0 3 * * *", "jobTemplate": {
                                   "entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
                                   "rayClusterSpec": {"headGroupSpec": {"template": t},
                                                      "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas,
                                                                            "template": _tmpl(spec)}]}}}},
    }
    return builders[kind]()


def has_builder(name: str) -> bool:
    """Whether ``make`` can build ``name`` (tried, not listed: the builders are the source of truth)."""
    try:
        make(name, {"containers": [cpu_container()]})
    except KeyError:
        return False
    return True


# Builder name of each kind (group, kind): the kind's name, except where two groups share one.
BUILDER_NAMES: dict[tuple[str, str], str] = {
    spec.api_group_kind: "VolcanoJob" if spec.api_group_kind == ("batch.volcano.sh", "Job") else spec.kind
    for spec in kinds.KINDS
}


def _names(specs) -> list[str]:
    # Kinds whose templates live in a runtime are built with runtime_for and tested on their own.
    return [BUILDER_NAMES[spec.api_group_kind] for spec in specs if spec.runtime is None]


def runtime_for(name: str, spec: dict) -> dict:
    """The runtime object a runtime kind's builder names, with ``spec`` as its trainer pod."""
    assert name == "TrainJob", f"add a runtime builder for {name}"
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch"},
            "spec": {"mlPolicy": {"numNodes": 1},
                     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                         "template": {"spec": copy.deepcopy({**spec, "containers": [
                             {**c, "name": "node"} for c in spec.get("containers", [])]})}}}}]}}}}


RUNTIME_KINDS = [BUILDER_NAMES[spec.api_group_kind] for spec in kinds.KINDS if spec.runtime is not None]
ALL_KINDS = _names(kinds.KINDS)
TRAINING_KINDS = _names(k for k in kinds.KINDS if k.default_class == "training")
INFERENCE_KINDS = _names(k for k in kinds.KINDS if k.default_class == "inference")
JOB_KINDS_WITH_TTL = _names(k for k in kinds.KINDS if k.job is not None and k.job.ttl is not None)
GANG_KINDS = _names(k for k in kinds.KINDS if k.gang is not None)


def template_specs(obj: dict) -> list[dict]:
    """Every pod spec of ``obj``, found through the kind table."""
    spec = kinds.lookup(obj["apiVersion"], obj["kind"])
    assert spec is not None
    return [get_path(obj, ref.spec_path) for ref in spec.locate(obj)]


def job_field(obj: dict, which: str) -> Any:
    spec = kinds.lookup(obj["apiVersion"], obj["kind"])
    path = getattr(spec.job, which)
    return get_path(obj, path) if path else None
