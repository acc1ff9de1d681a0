"""shm-volume: a memory-backed /dev/shm for GPU containers.

Container runtimes give /dev/shm 64 MiB; PyTorch DataLoader workers pass batches through
shared memory and die with "bus error" on it.  The fix is an emptyDir with
``medium: Memory`` and a ``sizeLimit`` mounted at /dev/shm.  Its pages count against the
container's memory limit, so the size limit is capped there too.  A container that
already mounts something at /dev/shm is the user's choice and is left alone.

Some operators manage /dev/shm themselves: KubeRay mounts a memory-backed /dev/shm sized to
the Ray container's memory limit (Ray's object store lives there).  It only adds its
volume when the container has no /dev/shm mount yet, so a mount gpuguard put in the
RayCluster template first would win and cap the object store at 16Gi, and Ray would fall
back to /tmp.  Spark executors are JVMs that move data through Spark's own block manager, not
DataLoader workers.  Templates of the kinds in ``operatorManagedKinds``, and pods their
controller creates, are therefore left alone.
"""

from __future__ import annotations

from pydantic import Field

from gpuguard.policies.base import MutatingPolicy, PolicySettings, accelerator_objects_only
from gpuguard.workloads import quantity
from gpuguard.workloads.paths import child_list
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    size_limit: str = Field("16Gi", description="sizeLimit of the memory-backed emptyDir.")
    operator_managed_kinds: list[str] = Field(
        default_factory=lambda: ["ray.io/RayCluster", "ray.io/RayJob", "ray.io/RayService", "ray.io/RayCronJob",
                                 "sparkoperator.k8s.io/SparkApplication",
                                 "sparkoperator.k8s.io/ScheduledSparkApplication"],
        description="group/Kind whose operator mounts its own /dev/shm (KubeRay), or whose pods have no "
        "data-loader workers (Spark's JVM executors): their templates and the pods they own are left alone.")
    mount_path: str = "/dev/shm"
    volume_name: str = "dshm"


def _volume_name(template: PodTemplate, settings: Settings) -> str | None:
    """The name of a fitting memory emptyDir volume, reusing ours; ``None`` if the name is taken."""
    volumes = template.volumes()
    existing = volumes.get(settings.volume_name)
    if existing is None:
        return settings.volume_name
    empty_dir = existing.get("emptyDir")
    if isinstance(empty_dir, dict) and empty_dir.get("medium") == "Memory":
        return settings.volume_name
    return None


def _size_limit(template: PodTemplate, settings: Settings) -> str:
    wanted = quantity.parse(settings.size_limit)
    limits = [c.memory_limit() for c in template.gpu_containers]
    caps = [limit for limit in limits if limit is not None]
    if wanted is not None and caps and min(caps) < wanted:
        return quantity.format_bytes(min(caps))
    return settings.size_limit


def _operator_managed(view: WorkloadView, settings: Settings) -> bool:
    managed = set(settings.operator_managed_kinds)
    if f"{view.kind.group}/{view.kind.kind}" in managed:
        return True
    owner = view.controller_owner()
    return owner is not None and f"{owner[0]}/{owner[1]}" in managed


def mutate(view: WorkloadView, settings: Settings) -> bool:
    if _operator_managed(view, settings):
        return False
    changed = False
    for template in view.gpu_templates:
        needing = [
            c for c in template.gpu_containers
            if not any(str(m.get("mountPath", "")).rstrip("/") == settings.mount_path for m in c.mounts())
        ]
        if not needing:
            continue
        name = _volume_name(template, settings)
        volumes = template.volume_list()
        if name is None or volumes is None:
            continue
        if name not in template.volumes():
            changed = True
            volumes.append({"name": name, "emptyDir": {"medium": "Memory",
                                                       "sizeLimit": _size_limit(template, settings)}})
        for container in needing:
            mounts = child_list(container.body, "volumeMounts")
            if mounts is not None:
                mounts.append({"name": name, "mountPath": settings.mount_path})
                changed = True
    return changed


POLICY = MutatingPolicy(
    id="shm-volume",
    title="Shared memory for data loaders",
    settings_model=Settings,
    run=mutate,
    description="Mounts a memory-backed emptyDir with a sizeLimit (default 16Gi, capped at the memory limit) at "
    "`/dev/shm` in accelerator containers that have none. Leaves alone workloads whose operator manages /dev/shm "
    "itself (`operatorManagedKinds`: KubeRay's RayCluster/RayJob/RayService/RayCronJob, which size it to the Ray "
    "container's memory limit for the object store) or whose pods have no data-loader workers (Spark applications: "
    "JVM executors), and the pods those operators create.",
    rationale="PyTorch DataLoader workers share batches through /dev/shm; on the 64 MiB default they die "
    "with a bus error hours into a run.",
    cpu_scope=accelerator_objects_only,
    writes=("volumes", "containers[].volumeMounts"),
)
