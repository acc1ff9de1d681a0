"""vLLM production-stack operator (``production-stack.vllm.ai``): VLLMRuntime.

A VLLMRuntime describes one Deployment of vLLM servers: ``deploymentConfig.replicas`` pods (up to
``autoscalingConfig.maxReplicas`` when autoscaling is enabled), each asking for the
``deploymentConfig.resources`` shorthand (``cpu``, ``memory``, ``gpu`` count and ``gpuType``), which
the operator writes as both requests and limits (``gpuguard.workloads.serving``).  CEL can't read
the shorthand: the webhook is called for every VLLMRuntime.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import get_path

# The operator's kustomize install (namespace production-stack-system, name prefix production-stack-).
VLLM_OPERATOR = Operator("vllm-production-stack",
                         ("system:serviceaccount:production-stack-system:production-stack-controller-manager",))


def runtime_pods(spec: dict) -> int:
    """``deploymentConfig.replicas`` (default 1), or ``autoscalingConfig.maxReplicas`` when enabled."""
    pods = count(get_path(spec, ("deploymentConfig", "replicas")))
    autoscaling = spec.get("autoscalingConfig")
    if isinstance(autoscaling, dict) and autoscaling.get("enabled") is True:
        pods = max(pods, count(autoscaling.get("maxReplicas"), 0))
    return pods


def _vllmruntime(obj: dict) -> Iterator[TemplateRef]:
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("deploymentConfig"), dict):
        yield TemplateRef("vllm", ("spec", "deploymentConfig"), None, runtime_pods(spec), shape="vllm")


VLLMRUNTIME = KindSpec("production-stack.vllm.ai", "VLLMRuntime", "vllmruntimes", ("v1alpha1",), "inference",
                       _vllmruntime, scale_replicas=("spec", "deploymentConfig", "replicas"),
                       controllers=(Creates(VLLM_OPERATOR, ("apps/Deployment",)),), class_fixed=True)
