"""gpu-memory-guard: GPU containers need a memory limit, and enough memory per GPU.

QoS counts only CPU and memory: a pod whose only limit is a GPU is BestEffort, the first
pod the kubelet evicts under memory pressure, taking its GPUs' work with it.  Without a
memory limit a container is unbounded Burstable and can OOM its neighbours on a shared
node.  Memory per GPU under a floor is only a warning: it is often a mistake (model
weights are staged through host memory) but can be deliberate.  The floor is per whole
device: a slice (MIG, shared, vGPU) needs its fraction of it, and never above what the devices' profile
sizes per device (the admin's word on the hosts they come in).  A pod-level memory limit
(``spec.resources``) bounds every container, so it counts as their limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads import quantity
from gpuguard.workloads.inventory import Inventory
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView


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
            if floor is None or devices <= 0 or limit / devices >= floor:
                continue  # the common case: what the floor can be lowered to is read only under it
            least = _floor(container, floor, devices, view.inventory)
            if least is not None and limit / devices < least:
                per_gpu, wanted = quantity.format_bytes(limit / devices), quantity.format_bytes(least)
                yield Finding(container.path, f"memory limit is {per_gpu} per device, under the {wanted} floor; "
                              "loading weights and data loaders may OOM",
                              f"raise {container.memory_setting} to at least {wanted} per device (its fraction "
                              "for a slice)", container.name, advisory=True)


def _floor(container: Container, floor: Decimal | None, devices: Decimal, inventory: Inventory) -> Decimal | None:
    """The floor per device, never above what the devices' own profile sizes per device (a profile sized for a
    small host, AWS Neuron's inf2.xlarge at 12Gi a device, is the admin's word on what that host has) nor above
    what the most generous node offering them has per device: default-resources fills no more than either, and
    a floor no node can meet is no advice, so gpuguard never warns about memory it set itself."""
    if floor is None or devices <= 0:
        return floor
    sized = container.companion_size().memory
    least = floor if not sized else min(floor, sized / devices)
    offered = [group.smallest["memory"] / group.smallest[resource] for resource in container.gpus
               for group in inventory.eligible([resource]) if group.shape_known
               and group.smallest.get(resource) and "memory" in group.smallest]
    return min(least, max(offered)) if offered else least


POLICY = ValidatingPolicy(
    id="gpu-memory-guard",
    title="Memory limits for GPU containers",
    settings_model=Settings,
    run=validate,
    description="Rejects GPU containers without a memory limit (BestEffort or unbounded Burstable; a pod-level "
    "memory limit counts); warns when memory per device is under a floor (16Gi, its fraction for a slice, never "
    "above what the devices' profile sizes or their nodes have per device).",
    rationale="A BestEffort GPU pod is evicted first under memory pressure and an unbounded one can OOM-kill "
    "its neighbours: either way GPU-hours of work are lost.",
    cpu_scope=accelerator_objects_only,
)
