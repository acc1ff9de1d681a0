"""LLMInferenceService accelerator totals: pods per LeaderWorkerSet group as KServe sizes them.

KServe runs each of ``replicas`` groups as one leader (``template``) plus ``size - 1`` workers
(``worker``), ``size`` being ``data / dataLocal`` with data parallelism, else the pipeline size;
tensor and expert parallelism live inside a pod.  An undercount lets a workload past the cap.
"""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads.kinds.kserve import llm_group_size

ENGINE = Engine(parse_config_text("kind: GpuguardConfig\n"))


def _pod(gpus: int) -> dict:
    return {"containers": [{"name": "main", "image": "vllm/vllm-openai",
                            "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "64Gi"}}}]}


def _workload(replicas: int | None, parallelism: dict | None, leader: int, worker: int | None) -> dict:
    out: dict = {"template": _pod(leader)}
    if replicas is not None:
        out["replicas"] = replicas
    if parallelism is not None:
        out["parallelism"] = parallelism
    if worker is not None:
        out["worker"] = _pod(worker)
    return out


def _llmisvc(spec: dict) -> dict:
    return {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
            "metadata": {"name": "deepseek", "namespace": "ml"},
            "spec": {"model": {"uri": "hf://deepseek-ai/DeepSeek-R1"}, **spec}}


@pytest.mark.parametrize(("parallelism", "size"), [
    (None, 1),
    ({}, 1),
    ({"tensor": 8}, 1),
    ({"pipeline": 2}, 2),
    ({"tensor": 8, "pipeline": 4}, 4),
    ({"data": 32, "dataLocal": 8, "expert": True}, 4),
    ({"data": 16, "dataLocal": 8}, 2),
    ({"data": 8}, 8),  # dataLocal defaults to 1: one rank per pod
    ({"data": 4, "dataLocal": 8}, 1),  # fewer ranks than one pod holds: one pod
    ({"data": 12, "dataLocal": 8}, 1),  # integer division, as the operator computes it
    ({"data": 16, "dataLocal": 8, "pipeline": 3}, 2),  # data parallelism sizes the group first
    ({"data": "32", "dataLocal": 8}, 1),  # not a count: ignored
    ({"data": 32, "dataLocal": 0}, 32),
])
def test_group_size(parallelism, size):
    assert llm_group_size(parallelism) == size


@pytest.mark.parametrize(("spec", "total"), [
    # A DeepSeek DP/EP shape: 32 ranks, 8 per pod, 8 GPUs per pod: 4 pods, 32 GPUs.
    (_workload(None, {"data": 32, "dataLocal": 8, "expert": True}, 8, 8), 32),
    (_workload(2, {"data": 32, "dataLocal": 8, "expert": True}, 8, 8), 64),
    (_workload(1, {"data": 16, "dataLocal": 8, "tensor": 1}, 8, 8), 16),
    (_workload(2, {"tensor": 4, "data": 8, "dataLocal": 4}, 4, 4), 16),
    (_workload(1, {"tensor": 8, "pipeline": 2}, 8, 8), 16),
    (_workload(3, {"tensor": 8, "pipeline": 4}, 8, 8), 96),
    (_workload(1, None, 8, 8), 16),  # a worker template counts one worker at least
    (_workload(3, None, 1, None), 3),  # single node: replicas x the template
    # Disaggregated: the prefill workload is sized by its own parallelism and replicas.
    ({**_workload(1, {"data": 16, "dataLocal": 8}, 8, 8),
      "prefill": _workload(2, {"data": 32, "dataLocal": 8}, 8, 8)}, 16 + 64),
    ({**_workload(4, None, 1, None), "prefill": _workload(2, {"tensor": 2}, 2, None)}, 4 + 4),
])
def test_workload_totals(spec, total):
    decision = ENGINE.evaluate(_llmisvc(spec), RequestContext(namespace="ml"))
    assert decision.gpus == total


def test_the_dp_ep_shape_past_the_cap_is_denied():
    """64 ranks over 8-GPU pods is 64 GPUs, within the default 64; 72 ranks is 9 pods and 72 GPUs: denied."""
    within = ENGINE.evaluate(_llmisvc(_workload(None, {"data": 64, "dataLocal": 8, "expert": True}, 8, 8)),
                             RequestContext(namespace="ml"))
    assert within.gpus == 64 and "gpu-request-shape" not in {v.policy for v in within.denials}
    over = ENGINE.evaluate(_llmisvc(_workload(None, {"data": 72, "dataLocal": 8, "expert": True}, 8, 8)),
                           RequestContext(namespace="ml"))
    assert over.gpus == 72 and "gpu-request-shape" in {v.policy for v in over.denials}
