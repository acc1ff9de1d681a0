"""KubeAI (``kubeai.org``): Model.

A Model names no resources of its own: ``resourceProfile: nvidia-gpu-l4:2`` is a profile of the KubeAI
config (its Helm values' ``resourceProfiles``) and a count, and KubeAI gives each server pod the
profile's requests and limits times the count, with the profile's node selector, affinity and
tolerations.  gpuguard reads the profiles from its own config (``kubeai.resourceProfiles``, merged
over the KubeAI Helm chart's defaults below, as Helm merges values), so a Model is judged as the pods
KubeAI will make; a profile gpuguard doesn't know can't be judged and is refused saying so.  Pods:
the most of ``replicas``, ``minReplicas`` and ``maxReplicas`` (at least 1).  CEL can't resolve a
profile: the webhook is called for every Model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count

# The KubeAI Helm chart (release kubeai in namespace kubeai, fullnameOverride kubeai): the model server Pods.
KUBEAI_CONTROLLER = Operator("kubeai", ("system:serviceaccount:kubeai:kubeai",))

_NVIDIA_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def _gpu_profile(requests: dict[str, Any] | None = None, tolerate: bool = True) -> dict[str, Any]:
    profile: dict[str, Any] = {"limits": {"nvidia.com/gpu": "1"}}
    if requests is not None:
        profile["requests"] = {"nvidia.com/gpu": "1", **requests}
    if tolerate:
        profile["tolerations"] = [dict(_NVIDIA_TOLERATION)]
    return profile


# The resource profiles the KubeAI Helm chart ships (charts/kubeai/values.yaml): the fallback when the
# config names none of its own.  The chart's profiles set no memory limit, so GPU models on them are
# unbounded Burstable pods (gpu-memory-guard says so, naming the profile to fix).
KUBEAI_CHART_PROFILES: dict[str, dict[str, Any]] = {
    "cpu": {"requests": {"cpu": "1", "memory": "2Gi"}},
    "nvidia-gpu-t4": _gpu_profile({}, tolerate=False),
    "nvidia-gpu-l4": _gpu_profile({"cpu": "6", "memory": "24Gi"}),
    "nvidia-gpu-l40s": _gpu_profile({"cpu": "6", "memory": "24Gi"}),
    "nvidia-gpu-h100": _gpu_profile(),
    "nvidia-gpu-gh200": _gpu_profile({}),
    "nvidia-gpu-a100-80gb": _gpu_profile(),
    "nvidia-gpu-a100-40gb": _gpu_profile(),
    "nvidia-gpu-a16": _gpu_profile(),
    "nvidia-gpu-rtx4070-8gb": _gpu_profile(),
}


def resource_profile(spec: Any) -> tuple[str, int] | None:
    """``"nvidia-gpu-l4:2"`` -> ("nvidia-gpu-l4", 2); a name without a count is 1; ``None`` when unset or
    unreadable (an empty name, a count that isn't a positive integer)."""
    text = spec.get("resourceProfile") if isinstance(spec, dict) else None
    if not isinstance(text, str) or not text.strip():
        return None
    name, _, amount = text.strip().partition(":")
    if not name:
        return None
    if not amount:
        return name, 1
    return (name, int(amount)) if amount.isdigit() and int(amount) > 0 else None


def model_pods(spec: dict) -> int:
    """Server pods of a Model at the most: ``replicas``, ``minReplicas``, ``maxReplicas`` (at least 1)."""
    return max(count(spec.get("replicas"), 0), count(spec.get("minReplicas"), 0), count(spec.get("maxReplicas"), 0),
               1)


def _model(obj: dict) -> Iterator[TemplateRef]:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        yield TemplateRef("server", ("spec",), None, model_pods(spec), shape="kubeai")


# KubeAI's Model CRD declares a scale subresource on spec.replicas (``kubectl scale model``, its autoscaler):
# scaling is judged like an edit of that field.
MODEL = KindSpec("kubeai.org", "Model", "models", ("v1",), "inference", _model,
                 controllers=(Creates(KUBEAI_CONTROLLER, ("Pod",)),), class_fixed=True,
                 scale_replicas=("spec", "replicas"))


def merged_profiles(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The config's ``kubeai.resourceProfiles`` merged over the chart's, as Helm merges values: maps key by
    key, other values replaced, a profile set to ``null`` removed."""

    def merge(base: Any, top: Any) -> Any:
        if isinstance(base, dict) and isinstance(top, dict):
            out = dict(base)
            for key, value in top.items():
                if value is None:
                    out.pop(key, None)
                else:
                    out[key] = merge(out.get(key), value)
            return out
        return top

    merged: dict[str, dict[str, Any]] = merge(KUBEAI_CHART_PROFILES, overrides)
    return merged
