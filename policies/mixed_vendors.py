"""mixed-vendors: one pod, one accelerator vendor, unless some node really carries both.

A pod that asks for ``nvidia.com/gpu`` and ``amd.com/gpu`` (in one container or two) needs a node that
has both: nodes are built with one vendor's devices, drivers and device plugin, so such a pod pends
forever, and a job's other pods hold their devices while it waits.  The vendor of a device is its
profile's ``vendor``, else its domain (``nvidia.com``; a slice's is the sliced device's, so a MIG slice
and a whole GPU are one vendor).  With a node inventory the pod is denied only where no node group or pool
offers every resource it asks for; without one it is denied (a node with two vendors' devices is a
build nobody makes by accident: where one exists, give gpuguard the node inventory).  Devices from DRA
claims are compared by their DeviceClass; the node inventory can't say which nodes' ResourceSlices offer
them, so a pod mixing a claim's vendor with another is judged as without an inventory.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.accelerators import Profile
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView


class Settings(PolicySettings):
    pass


def _vendors(view: WorkloadView, units: dict[str, Profile]) -> dict[str, list[str]]:
    """Vendor -> the resources (or DeviceClasses) of it, in name order."""
    out: dict[str, list[str]] = {}
    accelerators = view.accelerators
    for name in sorted(units):
        vendor = accelerators.vendor_of(units[name], name) if accelerators is not None else name.split("/")[0]
        out.setdefault(vendor, []).append(name)
    return out


def _container_units(container: Container) -> dict[str, Profile]:
    return {name: profile for name, _, profile in container.accelerator_units()}


def _offered_together(view: WorkloadView, names: list[str]) -> bool:
    """Whether a node group or pool of the inventory offers every one of ``names`` (extended resources only)."""
    if not view.inventory.known or any("/" not in n for n in names):
        return False
    return bool(view.inventory.eligible(names))


def _finding(view: WorkloadView, template: PodTemplate, vendors: dict[str, list[str]],
             container: Container | None) -> Finding | None:
    names = [n for group in vendors.values() for n in group]
    if _offered_together(view, names):
        return None
    first, second = (vendors[v][0] for v in list(vendors)[:2])
    who = f"container {container.name!r}" if container is not None else "the pod"
    why = "no node group offers both" if view.inventory.known and all("/" in n for n in names) \
        else "no node is known to carry both (no node inventory says so)"
    return Finding(container.path if container is not None else template.spec_path,
                   f"{who} asks for {first} and {second} ({len(vendors)} vendors): {why}, so it never schedules",
                   "use one vendor's accelerators per pod (one workload per vendor)",
                   container.name if container is not None else template.ref.role)


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    for template in view.gpu_templates:
        mixed = None
        for container in template.gpu_containers:
            vendors = _vendors(view, _container_units(container))
            if len(vendors) > 1:
                mixed = _finding(view, template, vendors, container)
                break
        else:
            units = {n: template.profile_of[n] for n in template.effective_gpus if n in template.profile_of}
            vendors = _vendors(view, units)
            if len(vendors) > 1:
                mixed = _finding(view, template, vendors, None)
        if mixed is not None:
            yield mixed


POLICY = ValidatingPolicy(
    id="mixed-vendors",
    title="One accelerator vendor per pod",
    settings_model=Settings,
    run=validate,
    description="Denies a pod (or one container) that asks for accelerators of two vendors (e.g. `nvidia.com/gpu` "
    "and `amd.com/gpu`; a vendor is the profile's `vendor`, else the resource's domain) unless a node group "
    "of the node inventory offers both; without an inventory no node is assumed to.",
    rationale="Nodes carry one vendor's devices, drivers and device plugin: a pod that needs two vendors' "
    "devices pends forever while the rest of its workload holds theirs.",
    cpu_scope=accelerator_objects_only,
)
