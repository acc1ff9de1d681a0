"""KServe (``serving.kserve.io``): InferenceService and LLMInferenceService.

Their components inline a PodSpec without pod metadata.  An InferenceService may be served through
Knative (its ``deploymentMode``), which refuses pod fields whose feature flag is off; its
predictor holds the model container under a framework key, which CEL can't follow, so the
webhook is called for every InferenceService.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import get_path

# KServe (kserve namespace): raw-deployment predictors become Deployments.
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


INFERENCESERVICE = KindSpec("serving.kserve.io", "InferenceService", "inferenceservices", ("v1beta1",), "inference",
                            _kserve, controllers=(Creates(KSERVE_CONTROLLER, ("apps/Deployment",)),))
LLMINFERENCESERVICE = KindSpec("serving.kserve.io", "LLMInferenceService", "llminferenceservices", ("v1alpha1",),
                               "inference", _llm_inference,
                               pod_spec_paths=(("spec", "template"), ("spec", "worker"),
                                               ("spec", "prefill", "template"), ("spec", "prefill", "worker")))
