"""gpu-memory-guard: GPU containers need a memory limit, and enough memory per GPU.

QoS counts only CPU and memory: a pod whose only limit is a GPU is BestEffort, the first
pod the kubelet evicts under memory pressure, taking its GPUs' work with it.  Without a
memory limit a container is unbounded Burstable and can OOM its neighbours on a shared
node.  Memory per GPU under a floor is only a warning: it is often a mistake (model
weights are staged through host memory) but can be deliberate.  The floor is per whole
device: a slice (MIG, shared, vGPU) needs its fraction of it.  A pod-level memory limit
(``spec.resources``) bounds every container, so it counts as their limit.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads import quantity
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    min_memory_per_gpu: str | None = Field("16Gi", description="Warn below this memory limit per GPU.")


def _best_effort(template: PodTemplate) -> bool:
    if template.has_pod_resources:
        return False  # pod-level resources are cpu/memory (or hugepages): not BestEffort
    for container in template.containers:
        res = container.resources() or {}
        for section in ("requests", "limits"):
            values = res.get(section)
            if isinstance(values, dict) and ("cpu" in values or "memory" in values):
                return False
    return True


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    floor = quantity.parse(settings.min_memory_per_gpu) if settings.min_memory_per_gpu else None
    for template in view.gpu_templates:
        pod_limit = quantity.parse(template.pod_resources("limits").get("memory"))
        best_effort = _best_effort(template)
        for container in template.gpu_containers:
            limit = container.memory_limit()
            if limit is None and pod_limit is not None:
                continue  # bounded by the pod-level limit
            if limit is None:
                qos = ("the pod is BestEffort (no CPU or memory requests or limits): evicted first under "
                       "memory pressure") if best_effort else "unbounded Burstable: it can be OOM-killed with " \
                       "its neighbours or evicted before them"
                yield Finding(container.path, f"GPU container has no memory limit, so {qos}",
                              f"set {container.memory_setting} (e.g. 64Gi per GPU) or enable default-resources",
                              container.name)
                continue
            devices = container.device_equivalents()
            if floor is not None and devices > 0 and limit / devices < floor:
                per_gpu = quantity.format_bytes(limit / devices)
                yield Finding(container.path, f"memory limit is {per_gpu} per device, under the "
                              f"{settings.min_memory_per_gpu} floor; loading weights and data loaders may OOM",
                              f"raise {container.memory_setting} to at least {settings.min_memory_per_gpu} per "
                              "device (its fraction for a slice)", container.name, advisory=True)


POLICY = ValidatingPolicy(
    id="gpu-memory-guard",
    title="Memory limits for GPU containers",
    settings_model=Settings,
    run=validate,
    description="Rejects GPU containers without a memory limit (BestEffort or unbounded Burstable; a pod-level "
    "memory limit counts); warns when memory per device is under a floor (16Gi, its fraction for a slice).",
    rationale="A BestEffort GPU pod is evicted first under memory pressure and an unbounded one can OOM-kill "
    "its neighbours: either way GPU-hours of work are lost.",
    cpu_scope=accelerator_objects_only,
)
