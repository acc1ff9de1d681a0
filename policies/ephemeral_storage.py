"""ephemeral-storage: GPU pods bound their scratch disk.

Container logs, the writable layer and disk-backed emptyDirs share the node's disk; a pod
that fills it (model downloads, dataset caches) is evicted and can take the node's other
GPU pods with it under disk pressure.  A warning by default: the fix is cheap but the
right size is the user's call.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.policies.base import Action, Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    action: Action = "warn"


def _nodes_list_no_disk(view: WorkloadView, template: PodTemplate) -> bool:
    """The nodes the pod may land on list no ephemeral-storage (read from the cluster): kube-scheduler finds any
    request of it "Insufficient" there, and a limit defaults the request, so asking for one would make it pend."""
    resources = sorted(r for r in template.effective_gpus if "/" in r)
    if not resources or not view.inventory.known:
        return False
    groups = view.inventory.eligible(resources)
    return bool(groups) and all(g.shape_known and "ephemeral-storage" not in g.smallest for g in groups)


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    for template in view.gpu_templates:
        for path, volume in template.volume_entries():
            empty_dir = volume.get("emptyDir")
            if isinstance(empty_dir, dict) and empty_dir.get("medium") != "Memory" and not empty_dir.get("sizeLimit"):
                yield Finding(path, "emptyDir without sizeLimit can fill the node's "
                              "disk and get the pod evicted", "set emptyDir.sizeLimit", str(volume.get("name", "")))
        for container in template.containers:
            if container.settable is not None and "ephemeral-storage" not in container.settable:
                continue  # the kind has no field for it (Spark)
            if container.resource_value("limits", "ephemeral-storage") is None and not _nodes_list_no_disk(view,
                                                                                                        template):
                yield Finding(container.path, "no ephemeral-storage limit: logs, caches and the writable layer can "
                              "fill the node's disk and evict its GPU pods",
                              "set resources.limits.ephemeral-storage", container.name)


POLICY = ValidatingPolicy(
    id="ephemeral-storage",
    title="Bounded scratch disk for GPU pods",
    settings_model=Settings,
    run=validate,
    description="Warns on GPU pods with a disk-backed emptyDir without sizeLimit or a container without an "
    "ephemeral-storage limit.",
    rationale="A pod that fills the node's disk is evicted, and disk pressure can evict the node's other GPU "
    "pods with it.",
    cpu_scope=accelerator_objects_only,
)
