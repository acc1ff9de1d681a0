"""KServe (``serving.kserve.io``): InferenceService and LLMInferenceService.

Their components inline a PodSpec without pod metadata.  An InferenceService may be served through
Knative (its ``deploymentMode``), which refuses pod fields whose feature flag is off; its
predictor holds the model container under a framework key, which CEL can't follow, so the
webhook is called for every InferenceService.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import (
    Creates,
    Declared,
    KindSpec,
    ListObjects,
    MergedRuntime,
    Operator,
    ReadObject,
    Resolved,
    ServingGroup,
    TemplateRef,
)
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import dicts, get_path

# KServe (kserve namespace): raw-deployment predictors become Deployments, Serverless ones Knative Services.
KSERVE_CONTROLLER = Operator("kserve", ("system:serviceaccount:kserve:kserve-controller-manager",))

# KServe components inline a PodSpec, plus one container under each framework key (its
# predictor.model form, the framework forms, the explainers): each is a full container.
_KSERVE_CONTAINER_KEYS = {
    "predictor": ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
                  "lightgbm", "paddle"),
    "transformer": (),
    "explainer": ("art", "alibi", "aix"),
}
KSERVE_MODE_ANNOTATION = "serving.kserve.io/deploymentMode"
_KNATIVE_SERVICE = "serving.knative.dev/Service"  # what a Serverless component becomes


def _kserve_knative(obj: dict) -> bool | None:
    """Knative-served (Serverless/Knative), not (RawDeployment/Standard/ModelMesh), or the cluster default."""
    mode = get_path(obj, ("metadata", "annotations", KSERVE_MODE_ANNOTATION))
    if mode in ("Serverless", "Knative"):
        return True
    if mode in ("RawDeployment", "Standard", "ModelMesh"):
        return False
    return None


def _kserve(obj: dict) -> Iterator[TemplateRef]:
    knative = _kserve_knative(obj)
    for component, keys in _KSERVE_CONTAINER_KEYS.items():
        comp = get_path(obj, ("spec", component))
        if not isinstance(comp, dict):
            continue
        # minReplicas defaults to 1; maxReplicas (0 = unset) is how far the autoscaler may go.
        replicas = max(count(comp.get("minReplicas")), 1, count(comp.get("maxReplicas"), 0))
        yield TemplateRef(component, ("spec", component), None, replicas, keys, knative)
        worker = comp.get("workerSpec")
        if isinstance(worker, dict):
            # Multi-node serving: one head pod plus a worker Deployment of (nodes - 1) pods, nodes being
            # the pipeline-parallel size in the usual one-node-per-stage layout (raw deployment only).
            nodes = count(worker.get("pipelineParallelSize"))
            yield TemplateRef(f"{component}-worker", ("spec", component, "workerSpec"), None, max(nodes - 1, 1),
                              knative=False)


def llm_group_size(parallelism: object) -> int:
    """Pods in one LeaderWorkerSet group of an LLMInferenceService workload (leader included).

    As KServe sizes the group: with data parallelism, ``data / dataLocal`` (each pod runs ``dataLocal``
    data-parallel ranks; integer division, at least 1); otherwise the ``pipeline`` size (one node per
    stage); else 1.  ``tensor`` and ``expert`` split the work *inside* a pod (its GPUs are its own
    resources), so they add no pods.
    """
    if not isinstance(parallelism, dict):
        return 1
    data = count(parallelism.get("data"), 0)
    if data:
        return max(data // max(count(parallelism.get("dataLocal")), 1), 1)
    return max(count(parallelism.get("pipeline")), 1)


def _llm_inference(obj: dict) -> Iterator[TemplateRef]:
    """LLMInferenceService: the main (decode) workload at ``spec`` and an optional ``spec.prefill``, each
    with a ``template`` PodSpec and, multi-node, a ``worker`` PodSpec (served by LeaderWorkerSets).

    Multi-node, each of ``replicas`` groups is one leader pod (``template``) and ``size - 1`` worker pods
    (``worker``), ``size`` from the workload's own ``parallelism`` (``llm_group_size``); a worker template
    counts at least one worker pod.
    """
    for role, prefix in (("main", ("spec",)), ("prefill", ("spec", "prefill"))):
        workload = get_path(obj, prefix)
        if not isinstance(workload, dict):
            continue
        scaling = workload.get("scaling")
        scaling = scaling if isinstance(scaling, dict) else {}
        replicas = count(workload.get("replicas")) if "replicas" in workload else max(
            count(scaling.get("minReplicas")), count(scaling.get("maxReplicas"), 0))
        if isinstance(workload.get("template"), dict):
            yield TemplateRef(role, prefix + ("template",), None, replicas)
        if isinstance(workload.get("worker"), dict):
            size = llm_group_size(workload.get("parallelism"))
            yield TemplateRef(f"{role}-worker", prefix + ("worker",), None, replicas * max(size - 1, 1))


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _kserve_groups(obj: dict) -> Iterator[ServingGroup]:
    """A multi-node predictor (``workerSpec``): a head pod and ``pipelineParallelSize - 1`` workers serve one
    model, each pod with ``tensorParallelSize`` GPUs (KServe passes both to the server)."""
    for component in _KSERVE_CONTAINER_KEYS:
        worker = get_path(obj, ("spec", component, "workerSpec"))
        if not isinstance(worker, dict):
            continue
        where = ("spec", component, "workerSpec")
        pp, tp = _positive(worker.get("pipelineParallelSize")), _positive(worker.get("tensorParallelSize"))
        per_pod = Declared(tp, f"tensorParallelSize {tp}", where + ("tensorParallelSize",)) if tp else None
        total = Declared((tp or 1) * pp, f"pipelineParallelSize {pp}" + (f" x tensorParallelSize {tp}" if tp else ""),
                         where + ("pipelineParallelSize",)) if pp else None
        comp = get_path(obj, ("spec", component))
        replicas = max(count(comp.get("minReplicas")), 1, count(comp.get("maxReplicas"), 0)) \
            if isinstance(comp, dict) else 1
        yield ServingGroup(component, f"{component}-worker", max(count(worker.get("pipelineParallelSize")), 1),
                           f"spec.{component}.workerSpec.pipelineParallelSize", replicas, per_pod, total)


def _llm_groups(obj: dict) -> Iterator[ServingGroup]:
    """Each LLMInferenceService workload (the main one at ``spec``, ``spec.prefill``) runs vLLM with its
    ``parallelism``: multi-node (a ``worker`` template), groups of ``llm_group_size`` pods, each pod running
    ``dataLocal`` data-parallel ranks of ``tensor`` devices (or, without data parallelism, one pipeline stage of
    ``tensor`` devices); single-node, one pod with ``--tensor-parallel-size tensor``.  Only fields the object
    sets are evidence: a workload without ``parallelism.tensor`` (single-node) says nothing here."""
    for role, prefix in (("main", ("spec",)), ("prefill", ("spec", "prefill"))):
        workload = get_path(obj, prefix)
        if not isinstance(workload, dict) or not isinstance(workload.get("template"), dict):
            continue
        parallelism = workload.get("parallelism")
        parallelism = parallelism if isinstance(parallelism, dict) else {}
        scaling = workload.get("scaling")
        scaling = scaling if isinstance(scaling, dict) else {}
        replicas = count(workload.get("replicas")) if "replicas" in workload else max(
            count(scaling.get("minReplicas")), count(scaling.get("maxReplicas"), 0))
        at = prefix + ("parallelism",)
        name = ".".join(at)
        tensor = _positive(parallelism.get("tensor"))
        tp_text = f"{name}.tensor {tensor}" if tensor else ""
        if not isinstance(workload.get("worker"), dict):
            if tensor:
                yield ServingGroup(role, role, 1, name, replicas, Declared(tensor, tp_text, at + ("tensor",)))
            continue
        data, local = _positive(parallelism.get("data")), _positive(parallelism.get("dataLocal"))
        pipeline = _positive(parallelism.get("pipeline"))
        tp = tensor or 1
        per_pod = total = None
        if data:
            if tensor or local:
                per_pod = Declared(tp * (local or 1), " x ".join(t for t in (
                    tp_text, f"{name}.dataLocal {local}" if local else "") if t), at)
            total = Declared(tp * data, " x ".join(t for t in (tp_text, f"{name}.data {data}") if t), at)
        elif pipeline:
            per_pod = Declared(tp, tp_text, at + ("tensor",)) if tensor else None
            total = Declared(tp * pipeline, " x ".join(t for t in (tp_text, f"{name}.pipeline {pipeline}") if t), at)
        yield ServingGroup(role, f"{role}-worker", llm_group_size(parallelism), name, replicas, per_pod, total)


# ---------------------------------------------------------------- serving runtimes
SERVING_RUNTIME, CLUSTER_SERVING_RUNTIME = "ServingRuntime", "ClusterServingRuntime"
# The predictor forms KServe serves through a runtime: ``model``, and the framework keys its defaulting
# webhook turns into ``model`` with that key as the model format (the runtime chosen by format).
_FRAMEWORK_FORMATS = tuple(k for k in _KSERVE_CONTAINER_KEYS["predictor"] if k != "model")
# Container fields of a predictor's model spec (the rest, modelFormat, runtime, storageUri ..., are KServe's).
_CONTAINER_FIELDS = frozenset({
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
    "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe",
    "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "securityContext",
    "stdin", "stdinOnce", "tty"})
# Runtime spec fields that are not pod fields.
_RUNTIME_ONLY = frozenset({
    "containers", "supportedModelFormats", "multiModel", "disabled", "protocolVersions", "builtInAdapter",
    "grpcEndpoint", "grpcDataEndpoint", "httpDataEndpoint", "replicas", "storageHelper", "workerSpec",
    "annotations", "labels"})
# List fields merged item by item under a key, as a strategic merge patch does (the object's item wins).
_MERGE_KEYS = {"env": "name", "volumeMounts": "mountPath", "ports": "containerPort", "volumes": "name",
               "imagePullSecrets": "name"}


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _model_spec(obj: dict) -> tuple[dict, str | None] | None:
    """The predictor's model spec and the format a framework key implies, or ``None`` when the predictor
    is served from its own containers (custom ``containers``, or ModelMesh, which places models in the
    runtime's shared pods instead of making pods per InferenceService)."""
    predictor = get_path(obj, ("spec", "predictor"))
    if not isinstance(predictor, dict) or get_path(obj, ("metadata", "annotations", KSERVE_MODE_ANNOTATION)) == \
            "ModelMesh":
        return None
    if isinstance(predictor.get("model"), dict):
        return predictor["model"], None
    for key in _FRAMEWORK_FORMATS:
        if isinstance(predictor.get(key), dict):
            return predictor[key], key
    return None


def _formats(runtime: dict, named: bool) -> list[dict]:
    """The runtime's supported formats it may be chosen for: all when named, else those with autoSelect."""
    return [f for _, f in dicts(get_path(runtime, ("spec", "supportedModelFormats")))
            if isinstance(f.get("name"), str) and (named or f.get("autoSelect") is True)]


def _supports(runtime: dict, name: str, version: str | None, protocol: str, named: bool) -> bool:
    """As KServe matches: the format's name, and its version when the model gives one; the model's protocol;
    not disabled; not a multi-model (ModelMesh) runtime."""
    spec = _dict(runtime.get("spec"))
    if spec.get("disabled") is True or spec.get("multiModel") is True:
        return False
    protocols = spec.get("protocolVersions")
    if isinstance(protocols, list) and protocols and protocol not in protocols:
        return False
    return any(f["name"] == name and (version is None or f.get("version") == version)
               for f in _formats(runtime, named))


def _priority(runtime: dict, name: str) -> int | None:
    for f in _formats(runtime, False):
        if f["name"] == name and isinstance(f.get("priority"), int) and not isinstance(f.get("priority"), bool):
            return f["priority"]
    return None


def _newest_first(runtimes: list[dict], name: str) -> list[dict]:
    """KServe's order: newest first, then by name; then (a stable sort) those with a priority for the
    format, highest first, before those without."""
    def created(r: dict) -> str:
        stamp = get_path(r, ("metadata", "creationTimestamp"))
        return stamp if isinstance(stamp, str) else ""

    def named(r: dict) -> str:
        value = get_path(r, ("metadata", "name"))
        return value if isinstance(value, str) else ""

    def by_priority(r: dict) -> tuple[int, int]:
        priority = _priority(r, name)
        return (1, 0) if priority is None else (0, -priority)

    ordered = sorted(sorted(runtimes, key=named), key=created, reverse=True)
    return sorted(ordered, key=by_priority)


def resolve_serving_runtime(obj: dict, namespace: str | None, read: ReadObject,
                            list_objects: ListObjects | None) -> Resolved | None:
    """The ServingRuntime or ClusterServingRuntime KServe serves this InferenceService's predictor with.

    Named (``predictor.model.runtime``): the ServingRuntime of that name in the namespace, else the
    ClusterServingRuntime.  Not named: the runtimes whose ``supportedModelFormats`` have the model's format
    name (and version, when the model gives one) with ``autoSelect: true``, the namespace's ServingRuntimes
    before the ClusterServingRuntimes, each ordered as KServe orders them (``priority`` first).
    """
    found = _model_spec(obj)
    if found is None:
        return None
    model, framework = found
    fmt = _dict(model.get("modelFormat"))
    name: str | None = fmt["name"] if isinstance(fmt.get("name"), str) else framework
    version: str | None = fmt["version"] if isinstance(fmt.get("version"), str) else None
    protocol: str = model["protocolVersion"] if isinstance(model.get("protocolVersion"), str) else "v1"
    runtime_name = model.get("runtime")
    if isinstance(runtime_name, str) and runtime_name:
        for kind, ns in ((SERVING_RUNTIME, namespace), (CLUSTER_SERVING_RUNTIME, None)):
            if kind == SERVING_RUNTIME and not ns:
                continue
            runtime = read(GROUP, kind, ns, runtime_name)
            if runtime is not None:
                if name is not None and not _supports(runtime, name, version, protocol, True):
                    return Resolved(None, kind, runtime_name, f"{kind} {runtime_name!r} does not serve model "
                                    f"format {name!r}{f' version {version!r}' if version else ''}")
                return Resolved(runtime, kind, runtime_name)
        return Resolved(None, CLUSTER_SERVING_RUNTIME, runtime_name,
                        f"no ServingRuntime or ClusterServingRuntime named {runtime_name!r}")
    if name is None:
        return Resolved(None, problem="the model names neither a runtime nor a modelFormat")
    if list_objects is None:
        return Resolved(None, problem=f"the runtimes for model format {name!r} could not be listed")
    for kind, ns in ((SERVING_RUNTIME, namespace), (CLUSTER_SERVING_RUNTIME, None)):
        if kind == SERVING_RUNTIME and not ns:
            continue
        listed = list_objects(GROUP, kind, ns)
        if listed is None:
            return Resolved(None, kind, problem=f"the {kind}s could not be listed")
        chosen = [r for r in listed if isinstance(r, dict) and _supports(r, name, version, protocol, False)]
        if chosen:
            best = _newest_first(chosen, name)[0]
            return Resolved(best, kind, str(get_path(best, ("metadata", "name"))))
    return Resolved(None, problem=f"no ServingRuntime or ClusterServingRuntime auto-selects model format "
                    f"{name!r}{f' version {version!r}' if version else ''}")


def _merge_list(base: list, over: list, key: str) -> list:
    """A strategic merge of two lists under ``key``: the base's items, each replaced by the override's item
    of the same key, then the override's new items."""
    out = [copy.deepcopy(i) for i in base]
    index = {i.get(key): n for n, i in enumerate(out) if isinstance(i, dict)}
    for item in over:
        if isinstance(item, dict) and item.get(key) in index:
            out[index[item[key]]] = _merge_dict(out[index[item[key]]], item)
        else:
            out.append(copy.deepcopy(item))
    return out


def _merge_dict(base: dict, over: dict) -> dict:
    """``over`` on top of ``base`` as a strategic merge patch of pod types does: maps merged key by key,
    keyed lists item by item, other values (scalars, plain lists such as args) replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if value is None:
            continue
        old = out.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            out[key] = _merge_dict(old, value)
        elif isinstance(old, list) and isinstance(value, list) and key in _MERGE_KEYS:
            out[key] = _merge_list(old, value, _MERGE_KEYS[key])
        else:
            out[key] = copy.deepcopy(value)
    return out


def _merge_pod(runtime_pod: dict, own: dict, own_container: dict | None) -> dict:
    """The pod KServe makes: the runtime's pod fields under the object's, the runtime's first container with
    the object's container fields over it, then the runtime's other containers and the object's own."""
    pod = _merge_dict({k: v for k, v in runtime_pod.items() if k not in _RUNTIME_ONLY},
                      {k: v for k, v in own.items() if k not in _KSERVE_CONTAINER_KEYS["predictor"]
                       and k not in ("containers", "workerSpec")})
    runtime_containers = [c for _, c in dicts(runtime_pod.get("containers"))]
    first = runtime_containers[0] if runtime_containers else {}
    containers = [_merge_dict(first, {k: v for k, v in (own_container or {}).items() if k in _CONTAINER_FIELDS})]
    containers += [copy.deepcopy(c) for c in runtime_containers[1:]]
    containers += [copy.deepcopy(c) for _, c in dicts(own.get("containers"))]
    pod["containers"] = containers
    return pod


def merge_serving_runtime(obj: dict, runtime: dict) -> dict:
    """The InferenceService as KServe serves it with ``runtime``: the predictor in ``containers`` form, its
    model container merged over the runtime's (the object's ``resources`` override the runtime's key by
    key), and, multi-node, the runtime's ``workerSpec`` under the predictor's."""
    out = copy.deepcopy(obj)
    predictor = out["spec"]["predictor"]
    found = _model_spec(obj)
    own_container = found[0] if found else None
    runtime_spec = _dict(runtime.get("spec"))
    merged = _merge_pod(runtime_spec, predictor, own_container)
    worker, runtime_worker = predictor.get("workerSpec"), runtime_spec.get("workerSpec")
    if isinstance(worker, dict):
        if isinstance(runtime_worker, dict):
            worker_containers = [c for _, c in dicts(worker.get("containers"))]
            merged["workerSpec"] = _merge_pod(runtime_worker, {**worker, "containers": worker_containers[1:]},
                                              worker_containers[0] if worker_containers else None)
            for key in ("pipelineParallelSize", "tensorParallelSize"):
                value = worker.get(key, runtime_worker.get(key))
                if value is not None:
                    merged["workerSpec"][key] = value
        else:
            merged["workerSpec"] = copy.deepcopy(worker)
    out["spec"]["predictor"] = merged
    return out


GROUP = "serving.kserve.io"
SERVING_RUNTIMES = MergedRuntime(GROUP, resolve_serving_runtime, merge_serving_runtime,
                                 ((SERVING_RUNTIME, "v1alpha1", "servingruntimes"),
                                  (CLUSTER_SERVING_RUNTIME, "v1alpha1", "clusterservingruntimes")))

INFERENCESERVICE = KindSpec("serving.kserve.io", "InferenceService", "inferenceservices", ("v1beta1",), "inference",
                            _kserve,
                            controllers=(Creates(KSERVE_CONTROLLER, ("apps/Deployment", _KNATIVE_SERVICE)),),
                            merged_runtime=SERVING_RUNTIMES, class_fixed=True, serving_groups=_kserve_groups)
LLMINFERENCESERVICE = KindSpec("serving.kserve.io", "LLMInferenceService", "llminferenceservices", ("v1alpha1",),
                               "inference", _llm_inference,
                               pod_spec_paths=(("spec", "template"), ("spec", "worker"),
                                               ("spec", "prefill", "template"), ("spec", "prefill", "worker")),
                               class_fixed=True, serving_groups=_llm_groups)
