"""Builders for every workload kind the engine knows, around one pod spec.

Tests parametrize over ``ALL_KINDS`` so each policy is exercised on each kind, and use
``template_specs`` to find the pod specs back in the engine's output.  The kind lists are
derived from ``gpuguard.workloads.kinds.KINDS`` (its default class, job fields, gang facts), so a new
``KindSpec`` is in every matrix at once; ``test_every_kind_has_a_builder`` fails until it
has a builder here.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from gpuguard.workloads import kinds, quantity
from gpuguard.workloads.paths import get_path


def gpu_container(gpus: int = 1, name: str = "trainer", **extra: Any) -> dict:
    container = {"name": name, "image": "ghcr.io/example/train:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    container.update(extra)
    return container


def container(image: str, command: list[str] | None = None, args: list[str] | None = None,
              resources: dict | None = None, name: str = "main", **extra: Any) -> dict:
    """A container written as a sample writes it: only the fields given appear (no resources unless given)."""
    body: dict = {"name": name, "image": image}
    for key, value in (("resources", resources), ("command", command), ("args", args)):
        if value is not None:
            body[key] = value
    body.update(extra)
    return body


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
        "SparkApplication": lambda: {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                     "metadata": meta, "spec": spark_app(spec, replicas)},
        "ScheduledSparkApplication": lambda: {"apiVersion": "sparkoperator.k8s.io/v1beta2",
                                              "kind": "ScheduledSparkApplication", "metadata": meta,
                                              "spec": {"schedule": "@daily", "template": spark_app(spec, replicas)}},
        "Workflow": lambda: {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": meta,
                             "spec": argo_workflow(spec, replicas)},
        "WorkflowTemplate": lambda: {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate",
                                     "metadata": meta, "spec": argo_workflow(spec, replicas)},
        "CronWorkflow": lambda: {"apiVersion": "argoproj.io/v1alpha1", "kind": "CronWorkflow", "metadata": meta,
                                 "spec": {"schedule": "0 2 * * *", "workflowSpec": argo_workflow(spec, replicas)}},
        "DynamoGraphDeployment": lambda: {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                                          "metadata": meta, "spec": {"backendFramework": "vllm", "services": {
                                              "VllmWorker": dynamo_component(spec, replicas)}}},
        "DynamoComponentDeployment": lambda: {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
                                              "metadata": meta, "spec": {"serviceName": "VllmWorker",
                                                                         **dynamo_component(spec, replicas)}},
        "NIMService": lambda: {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService", "metadata": meta,
                               "spec": nim_service(spec, replicas)},
        "StormService": lambda: {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
                                 "metadata": meta, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                                                            "template": {"metadata": {"labels": {"app": "x"}},
                                                                         "spec": {"roles": [{"name": "worker",
                                                                                             "replicas": replicas,
                                                                                             "template": t}]}}}},
        "RoleSet": lambda: {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet", "metadata": meta,
                            "spec": {"roles": [{"name": "worker", "replicas": replicas, "template": t}]}},
        "PodSet": lambda: {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet", "metadata": meta,
                           "spec": {"podGroupSize": replicas, "template": t}},
        "VLLMRuntime": lambda: {"apiVersion": "production-stack.vllm.ai/v1alpha1", "kind": "VLLMRuntime",
                                "metadata": meta, "spec": vllm_runtime(spec, replicas)},
        "Model": lambda: {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": meta,
                          "spec": kubeai_model(spec, replicas)},
        "KnativeService": lambda: {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": meta,
                                   "spec": {"template": {"metadata": {"annotations": {
                                       "autoscaling.knative.dev/max-scale": str(replicas)}},
                                       "spec": copy.deepcopy(spec)}}},
    }
    return builders[kind]()


_POD_FIELDS = ("tolerations", "nodeSelector", "affinity", "priorityClassName", "schedulerName")


def spark_app(spec: dict, executors: int = 1) -> dict:
    """A SparkApplication spec whose executors run ``spec``'s first container (its GPU limit as the
    typed ``gpu`` field), with a CPU driver; the pod's volumes are the application's."""
    spec = copy.deepcopy(spec)
    main = (spec.get("containers") or [{}])[0]
    executor: dict = {"cores": 4, "instances": executors}
    for resource, amount in ((main.get("resources") or {}).get("limits") or {}).items():
        if "/" in resource:
            executor["gpu"] = {"name": resource, "quantity": amount}
    for key in ("image", "env", "envFrom", "volumeMounts"):
        if key in main:
            executor[key] = main[key]
    executor.update({k: spec[k] for k in _POD_FIELDS if k in spec})
    app = {"type": "Python", "mode": "cluster", "image": "ghcr.io/example/spark:3.5", "sparkVersion": "3.5.1",
           "mainApplicationFile": "local:///opt/app/job.py", "driver": {"cores": 1, "memory": "2g"},
           "executor": executor}
    if spec.get("volumes"):
        app["volumes"] = spec["volumes"]
    return app


def argo_workflow(spec: dict, replicas: int = 1) -> dict:
    """A WorkflowSpec whose one step runs ``spec`` as a container template, fanned out ``replicas`` times."""
    spec = copy.deepcopy(spec)
    containers = spec.get("containers") or [{}]
    work: dict = {"name": "work", "container": containers[0]}
    if containers[1:]:
        work["sidecars"] = containers[1:]
    for key in ("initContainers", "volumes", *_POD_FIELDS):
        if key in spec:
            work[key] = spec[key]
    return {"entrypoint": "main",
            "templates": [{"name": "main", "steps": [[{"name": "run", "template": "work",
                                                       "withItems": list(range(replicas))}]]}, work]}


def shorthand(resources: Any) -> dict:
    """A container's resource list in the Dynamo / production-stack shorthand: ``cpu``, ``memory`` and one
    accelerator as a ``gpu`` count with its ``gpuType``."""
    item: dict = {}
    for name, amount in (resources or {}).items():
        if name in ("cpu", "memory"):
            item[name] = str(amount)
        elif "/" in name:
            item.update(gpu=str(amount), gpuType=name)
    return item


def dynamo_component(spec: dict, replicas: int = 1) -> dict:
    """A Dynamo component running ``spec``'s first container as its ``mainContainer``, the container's
    resources in the service's shorthand and the other pod fields in ``extraPodSpec``."""
    pod = copy.deepcopy(spec)
    containers = pod.pop("containers", None) or [{}]
    main = containers[0]
    resources = main.pop("resources", None) or {}
    if containers[1:]:
        pod["containers"] = containers[1:]
    pod.pop("restartPolicy", None)
    return {"componentType": "worker", "replicas": replicas,
            "resources": {section: shorthand(resources.get(section)) for section in ("requests", "limits")
                          if resources.get(section)},
            "extraPodSpec": {**pod, "mainContainer": main}}


def nim_service(spec: dict, replicas: int = 1) -> dict:
    """A NIMService running ``spec``'s first container: its image as ``repository``/``tag``, its resources,
    env and mounts inline, beside the pod's fields."""
    pod = copy.deepcopy(spec)
    main = (pod.pop("containers", None) or [{}])[0]
    repository, _, tag = str(main.get("image", "nvcr.io/nim/meta/llama3-8b-instruct:1.0.3")).rpartition(":")
    out: dict = {"image": {"repository": repository, "tag": tag}, "authSecret": "ngc-api-secret",
                 "replicas": replicas, "expose": {"service": {"type": "ClusterIP", "port": 8000}}}
    out.update({k: main[k] for k in ("resources", "env", "envFrom", "volumeMounts", "command", "args") if k in main})
    out.update({k: pod[k] for k in ("volumes", *_POD_FIELDS) if k in pod})
    return out


def vllm_runtime(spec: dict, replicas: int = 1) -> dict:
    """A VLLMRuntime serving with ``spec``'s first container's image and resources (as the shorthand)."""
    main = (spec.get("containers") or [{}])[0]
    limits = {**((main.get("resources") or {}).get("requests") or {}),
              **((main.get("resources") or {}).get("limits") or {})}
    registry, _, name = str(main.get("image", "vllm/vllm-openai:latest")).rpartition("/")
    return {"model": {"modelURL": "meta-llama/Llama-3.1-8B-Instruct"},
            "vllmConfig": {"tensorParallelSize": 1, "port": 8000,
                           **({"env": copy.deepcopy(main["env"])} if "env" in main else {})},
            "deploymentConfig": {"replicas": replicas, "resources": shorthand(limits),
                                 "image": {"registry": registry, "name": name}}}


def kubeai_model(spec: dict, replicas: int = 1) -> dict:
    """A KubeAI Model on the chart's L4 profile, one GPU of it per GPU of ``spec``'s first container (the CPU
    profile without), with that container's image and env."""
    main = (spec.get("containers") or [{}])[0]
    amounts = (quantity.parse(v) for k, v in ((main.get("resources") or {}).get("limits") or {}).items() if "/" in k)
    gpus = sum(math.ceil(a) for a in amounts if a is not None and a > 0)
    out: dict = {"url": "hf://meta-llama/Llama-3.1-8B-Instruct", "engine": "VLLM", "features": ["TextGeneration"],
                 "resourceProfile": f"nvidia-gpu-l4:{gpus}" if gpus else "cpu:1", "replicas": replicas}
    if "image" in main:
        out["image"] = main["image"]
    if main.get("env"):
        out["env"] = {e["name"]: e.get("value", "") for e in main["env"]}
    return out


def has_builder(name: str) -> bool:
    """Whether ``make`` can build ``name`` (tried, not listed: the builders are the source of truth)."""
    try:
        make(name, {"containers": [cpu_container()]})
    except KeyError:
        return False
    return True


# Builder name of each kind (group, kind): the kind's name, except where two groups share one.
_SHARED_NAMES = {("batch.volcano.sh", "Job"): "VolcanoJob", ("serving.knative.dev", "Service"): "KnativeService"}
BUILDER_NAMES: dict[tuple[str, str], str] = {
    spec.api_group_kind: _SHARED_NAMES.get(spec.api_group_kind, spec.kind) for spec in kinds.KINDS
}


def pod_shaped(spec: kinds.KindSpec) -> bool:
    """Whether the kind's templates are PodSpecs with ``containers`` lists that take every pod field, as the shared
    matrices expect; Spark's driver/executor specs, Argo's container templates and Knative-served templates have
    their own tests."""
    obj = make(BUILDER_NAMES[spec.api_group_kind], bare_pod_spec())
    return all(ref.shape == "pod" and ref.container_lists == kinds.POD_CONTAINER_LISTS and ref.knative is False
               for ref in spec.locate(obj))


def _names(specs) -> list[str]:
    # Kinds whose templates live in a runtime are built with runtime_for and tested on their own.
    return [BUILDER_NAMES[spec.api_group_kind] for spec in specs if spec.runtime is None and pod_shaped(spec)]


def runtime_for(name: str, spec: dict) -> dict:
    """The runtime object a runtime kind's builder names, with ``spec`` as its trainer pod."""
    assert name == "TrainJob", f"add a runtime builder for {name}"
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch"},
            "spec": {"mlPolicy": {"numNodes": 1},
                     "template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
                         "template": {"spec": copy.deepcopy({**spec, "containers": [
                             {**c, "name": "node"} for c in spec.get("containers", [])]})}}}}]}}}}


# Kinds that write pods their own way (Spark, Argo), or whose pods Knative serves (a Knative Service: the pod fields
# Knative's config-features gate are never added): tests/unit/workloads/test_spark_argo.py.
ADAPTED_KINDS = [BUILDER_NAMES[spec.api_group_kind] for spec in kinds.KINDS
                 if spec.runtime is None and not pod_shaped(spec)]
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
