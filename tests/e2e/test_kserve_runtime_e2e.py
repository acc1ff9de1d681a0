"""An InferenceService in model form judged with the ServingRuntime KServe would merge into its pods,
through a real kube-apiserver: the runtimes are read (and listed, to select by model format) by the
webhook server from the API, as in a cluster where KServe ships ClusterServingRuntimes.

No KServe controller runs: what is checked is gpuguard's answer to ``kubectl apply`` as ``alice``.
"""

from __future__ import annotations

import uuid

import pytest

from tests.support.gpuguard_process import ROOT, default_config_with, in_force
from tests.support.tenant import TenantEnv

pytestmark = pytest.mark.e2e




def serving_runtime(name: str, gpus: int, fmt: str, namespace: str | None = None) -> dict:
    meta: dict = {"name": name}
    kind = "ClusterServingRuntime"
    if namespace:
        meta["namespace"], kind = namespace, "ServingRuntime"
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": kind, "metadata": meta, "spec": {
        "supportedModelFormats": [{"name": fmt, "autoSelect": True, "priority": 1}],
        "protocolVersions": ["v1", "v2"],
        "containers": [{"name": "kserve-container", "image": "vllm/vllm-openai:v0.9.2",
                        "args": ["--port=8080", "--model=/mnt/models"],
                        "resources": {"requests": {"cpu": "4", "memory": "32Gi"},
                                      "limits": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": gpus}}}]}}


def isvc(ns: str, name: str, min_replicas: int, fmt: str, runtime: str | None = None) -> dict:
    model: dict = {"modelFormat": {"name": fmt}, "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct"}
    if runtime:
        model["runtime"] = runtime
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
            "spec": {"predictor": {"minReplicas": min_replicas, "model": model}}}



@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("inferenceservice", "servingruntime", "clusterservingruntime")
    e = TenantEnv(cp, "kserve")
    # The platform team's runtimes, before gpuguard first lists them (its lists are cached).
    for runtime in (serving_runtime("vllm-1gpu", 1, "vllm"), serving_runtime("big-8gpu", 8, "big")):
        assert e.apply(runtime, user=None).returncode == 0
    probe = e.namespace()
    # A new name each try: before the webhooks are in force the probe is created, and re-applying it
    # unchanged would be an UPDATE that does not grow.
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), default_config_with("kserve-exempt"),
                  lambda: "gpu-request-shape" in e.apply(isvc(probe, f"probe-{uuid.uuid4().hex[:6]}", 100,
                                                              "vllm")).stderr,
                  kubeconfig=cp.kubeconfig):
        yield e


def test_min_replicas_times_the_runtimes_gpu_is_denied_by_the_workload_cap(env):
    ns = env.namespace()
    denied = env.apply(isvc(ns, "llama", 100, "vllm"))
    assert denied.returncode != 0
    assert "[gpu-request-shape] with ClusterServingRuntime vllm-1gpu: spec" in denied.stderr, denied.stderr
    assert "100 accelerators" in denied.stderr
    admitted = env.apply(isvc(ns, "llama", 4, "vllm"))
    assert admitted.returncode == 0, admitted.stderr


def test_named_and_namespaced_runtimes_are_the_ones_kserve_would_use(env):
    ns = env.namespace()
    # Named: the 8-GPU runtime, 9 pods: 72 GPUs.
    named = env.apply(isvc(ns, "named", 9, "big", runtime="big-8gpu"))
    assert named.returncode != 0 and "72 accelerators" in named.stderr, named.stderr
    # The namespace's own ServingRuntime for the format comes before the ClusterServingRuntime.
    assert env.apply(serving_runtime("team-vllm", 8, "vllm", namespace=ns)).returncode == 0
    chosen = env.apply(isvc(ns, "team", 9, "vllm"))
    assert chosen.returncode != 0 and "with ServingRuntime team-vllm" in chosen.stderr, chosen.stderr


def test_an_unresolvable_runtime_is_refused_saying_why(env):
    ns = env.namespace()
    missing = env.apply(isvc(ns, "missing", 1, "vllm", runtime="no-such-runtime"))
    assert missing.returncode != 0
    assert "no ServingRuntime or ClusterServingRuntime named 'no-such-runtime'" in missing.stderr, missing.stderr
    unserved = env.apply(isvc(ns, "unserved", 1, "onnx"))
    assert unserved.returncode != 0 and "auto-selects model format 'onnx'" in unserved.stderr, unserved.stderr
