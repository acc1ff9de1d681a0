"""An InferenceService in model form is judged with the ServingRuntime KServe merges into its pods.

Without the runtime a predictor that names only a model format counts 0 GPUs, and ``minReplicas: 100``
passes every cap.  The runtime is chosen as KServe chooses it (named, else selected by format), merged
as KServe merges it (the model's container fields over the runtime's), and an InferenceService whose
runtime can't be resolved is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.objects import ApiLookup, StaticLookup
from gpuguard.workloads.kinds.kserve import merge_serving_runtime, resolve_serving_runtime

ENGINE = Engine(parse_config_text("kind: GpuguardConfig\n"))


def _runtime(name: str, gpus: int = 1, *, kind: str = "ClusterServingRuntime", namespace: str | None = None,
             fmt: str = "vllm", version: str | None = None, auto: bool = True, priority: int | None = None,
             **spec: Any) -> dict:
    supported: dict = {"name": fmt, "autoSelect": auto}
    if version is not None:
        supported["version"] = version
    if priority is not None:
        supported["priority"] = priority
    meta: dict = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": kind, "metadata": meta,
            "spec": {"supportedModelFormats": [supported],
                     "containers": [{"name": "kserve-container", "image": f"{name}:1", "args": ["--port=8080"],
                                     "env": [{"name": "PORT", "value": "8080"}],
                                     "resources": {"limits": {"cpu": "8", "memory": "64Gi",
                                                              "nvidia.com/gpu": gpus}}}], **spec}}


def _created(runtime: dict, stamp: str) -> dict:
    runtime["metadata"]["creationTimestamp"] = stamp
    return runtime


def _isvc(min_replicas: int = 1, **model: Any) -> dict:
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "llama", "namespace": "ml",
                         "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
            "spec": {"predictor": {"minReplicas": min_replicas,
                                   "model": {"modelFormat": {"name": "vllm"}, "storageUri": "hf://m", **model}}}}


def _chosen(isvc: dict, runtimes: list[dict]) -> str | None:
    lookup = StaticLookup(runtimes)
    resolved = resolve_serving_runtime(isvc, "ml", lookup, lookup.list_objects)
    assert resolved is not None
    return None if resolved.runtime is None else f"{resolved.kind}/{resolved.name}"


@pytest.mark.parametrize(("model", "runtimes", "chosen"), [
    ({}, [_runtime("a")], "ClusterServingRuntime/a"),
    ({}, [_runtime("a", fmt="sklearn")], None),  # another format
    ({}, [_runtime("a", auto=False)], None),  # not auto-selectable
    ({"runtime": "a"}, [_runtime("a", auto=False)], "ClusterServingRuntime/a"),  # named: autoSelect not needed
    ({"runtime": "a"}, [_runtime("a", fmt="sklearn")], None),  # named, but it doesn't serve the format
    ({"runtime": "missing"}, [_runtime("a")], None),
    ({}, [_runtime("a"), _runtime("b", kind="ServingRuntime", namespace="ml")], "ServingRuntime/b"),
    ({}, [_runtime("a"), _runtime("b", kind="ServingRuntime", namespace="other")], "ClusterServingRuntime/a"),
    ({"runtime": "b"}, [_runtime("b"), _runtime("b", kind="ServingRuntime", namespace="ml")], "ServingRuntime/b"),
    ({}, [_runtime("a", priority=1), _runtime("b", priority=5)], "ClusterServingRuntime/b"),
    ({}, [_runtime("a"), _runtime("b", priority=1)], "ClusterServingRuntime/b"),  # a priority first
    ({}, [_created(_runtime("a"), "2025-01-01T00:00:00Z"), _created(_runtime("b"), "2026-01-01T00:00:00Z")],
     "ClusterServingRuntime/b"),  # newest first
    ({}, [_runtime("b"), _runtime("a")], "ClusterServingRuntime/a"),  # then by name
    ({}, [_runtime("a", disabled=True), _runtime("b")], "ClusterServingRuntime/b"),
    ({}, [_runtime("a", multiModel=True), _runtime("b")], "ClusterServingRuntime/b"),
    ({}, [_runtime("a", protocolVersions=["v2"]), _runtime("b", protocolVersions=["v1", "v2"])],
     "ClusterServingRuntime/b"),  # the model's protocol defaults to v1
    ({"modelFormat": {"name": "vllm", "version": "2"}}, [_runtime("a", version="1"), _runtime("b", version="2")],
     "ClusterServingRuntime/b"),
    ({"modelFormat": {"name": "vllm", "version": "3"}}, [_runtime("a", version="1")], None),
])
def test_runtime_selection(model, runtimes, chosen):
    assert _chosen(_isvc(**model), runtimes) == chosen


def test_framework_keys_select_by_their_format_and_custom_containers_need_no_runtime():
    sklearn = _isvc()
    sklearn["spec"]["predictor"] = {"sklearn": {"storageUri": "gs://m"}}
    assert _chosen(sklearn, [_runtime("mlserver", fmt="sklearn")]) == "ClusterServingRuntime/mlserver"
    custom = _isvc()
    custom["spec"]["predictor"] = {"containers": [{"name": "kserve-container", "image": "mine"}]}
    assert resolve_serving_runtime(custom, "ml", StaticLookup([]), None) is None
    mesh = _isvc()
    mesh["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] = "ModelMesh"
    assert resolve_serving_runtime(mesh, "ml", StaticLookup([]), None) is None


def test_merge_puts_the_models_container_fields_over_the_runtimes():
    runtime = _runtime("vllm", 8, nodeSelector={"pool": "gpu"}, tolerations=[{"key": "a", "operator": "Exists"}])
    runtime["spec"]["containers"].append({"name": "agent", "image": "agent:1"})
    isvc = _isvc(resources={"limits": {"nvidia.com/gpu": 2}}, args=["--max-model-len=8192"],
                 env=[{"name": "HF_HOME", "value": "/cache"}, {"name": "PORT", "value": "9000"}])
    isvc["spec"]["predictor"]["tolerations"] = [{"key": "b", "operator": "Exists"}]
    predictor = merge_serving_runtime(isvc, runtime)["spec"]["predictor"]
    main, agent = predictor["containers"]
    assert main["image"] == "vllm:1" and main["args"] == ["--max-model-len=8192"]  # lists replaced
    assert main["resources"]["limits"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 2}  # key by key
    assert main["env"] == [{"name": "PORT", "value": "9000"}, {"name": "HF_HOME", "value": "/cache"}]  # by name
    assert "storageUri" not in main and "modelFormat" not in main
    assert agent["name"] == "agent" and "model" not in predictor
    assert predictor["nodeSelector"] == {"pool": "gpu"} and predictor["tolerations"] == [{"key": "b",
                                                                                          "operator": "Exists"}]
    assert predictor["minReplicas"] == 1


def test_multi_node_workers_take_the_runtimes_worker_spec():
    runtime = _runtime("hf", 4, workerSpec={"pipelineParallelSize": 2, "containers": [
        {"name": "worker-container", "image": "hf:1", "resources": {"limits": {"nvidia.com/gpu": 4}}}]})
    isvc = _isvc()
    isvc["spec"]["predictor"]["workerSpec"] = {"pipelineParallelSize": 3}
    decision = ENGINE.evaluate(isvc, RequestContext(namespace="ml", read_object=StaticLookup([runtime])))
    assert decision.gpus == 4 + 2 * 4  # the head pod and pipelineParallelSize - 1 workers


def test_the_runtime_gpus_count_and_findings_name_the_runtime():
    lookup = StaticLookup([_runtime("vllm")])
    decision = ENGINE.evaluate(_isvc(100), RequestContext(namespace="ml", read_object=lookup))
    assert decision.gpus == 100 and not decision.allowed
    (shape,) = [v for v in decision.denials if v.policy == "gpu-request-shape"]
    assert shape.path == "with ClusterServingRuntime vllm: spec" and "100 accelerators" in shape.message


def test_unresolvable_runtime_is_refused_unless_failure_mode_open():
    refused = ENGINE.evaluate(_isvc(1, runtime="gone"), RequestContext(namespace="ml", read_object=StaticLookup([])))
    assert not refused.allowed and refused.error
    assert "no ServingRuntime or ClusterServingRuntime named 'gone'" in refused.error
    unlisted = ENGINE.evaluate(_isvc(1), RequestContext(namespace="ml"))
    assert not unlisted.allowed and "could not be listed" in (unlisted.error or "")
    onnx = StaticLookup([_runtime("x", fmt="onnx")])
    none = ENGINE.evaluate(_isvc(1), RequestContext(namespace="ml", read_object=onnx))
    assert "auto-selects model format 'vllm'" in (none.error or "")
    opened = Engine(parse_config_text("kind: GpuguardConfig\nfailureMode: open\n"))
    assert opened.evaluate(_isvc(1), RequestContext(namespace="ml")).allowed


def test_the_mutating_half_needs_no_runtime_and_is_unchanged():
    """/mutate mutates by the object's own fields, as before; the runtime is read for /validate."""
    isvc = _isvc(1, resources={"limits": {"nvidia.com/gpu": 1}})
    mutated = ENGINE.evaluate(isvc, RequestContext(namespace="ml", validate=False))
    assert not mutated.error and "gpu-tolerations" in mutated.mutated_by


def test_update_that_does_not_grow_is_not_denied_for_the_old_total():
    lookup = StaticLookup([_runtime("vllm")])
    old, new = _isvc(100), _isvc(90)
    shrink = ENGINE.evaluate(new, RequestContext(operation="UPDATE", namespace="ml", old_object=old,
                                                 read_object=lookup))
    assert "gpu-request-shape" not in {v.policy for v in shrink.denials}
    grow = ENGINE.evaluate(_isvc(110), RequestContext(operation="UPDATE", namespace="ml", old_object=old,
                                                      read_object=lookup))
    assert "gpu-request-shape" in {v.policy for v in grow.denials}


class _Api:
    """The API's custom-objects calls, counting them."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects, self.calls = StaticLookup(objects), 0

    def list_namespaced_custom_object(self, group, version, namespace, plural, **_):
        self.calls += 1
        return {"items": self.objects.list_objects(group, "ServingRuntime", namespace)}

    def list_cluster_custom_object(self, group, version, plural, **_):
        self.calls += 1
        return {"items": self.objects.list_objects(group, "ClusterServingRuntime", None)}


def test_the_server_lists_before_the_engine_and_the_engine_reads_the_cache():
    api = _Api([_runtime("vllm")])
    lookup = ApiLookup(api=api)
    ctx = RequestContext(namespace="ml", mutate=False, read_object=lookup.cached, list_objects=lookup.cached_list)
    assert ENGINE.evaluate(_isvc(100), ctx).error  # nothing cached yet: nothing read on the engine's thread
    assert api.calls == 0
    lookup.prefetch(_isvc(100), "ml")
    assert api.calls == 2  # the namespace's ServingRuntimes, then the ClusterServingRuntimes
    decision = ENGINE.evaluate(_isvc(100), ctx)
    assert decision.gpus == 100 and not decision.allowed
    lookup.prefetch(_isvc(100), "ml")
    assert api.calls == 2  # cached
