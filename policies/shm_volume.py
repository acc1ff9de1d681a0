"""shm-volume: a memory-backed /dev/shm for GPU containers.

Container runtimes give /dev/shm 64 MiB; PyTorch DataLoader workers pass batches through
shared memory and die with "bus error" on it.  The fix is an emptyDir with
``medium: Memory`` and a ``sizeLimit`` mounted at /dev/shm.  Its pages count against the
container's memory limit, so the size limit is capped there too.  A container that
already mounts something at /dev/shm is the user's choice and is left alone.
"""

from __future__ import annotations

from pydantic import Field

from policies.base import MutatingPolicy, PolicySettings
from workloads import quantity
from workloads.paths import child_list
from workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    size_limit: str = Field("16Gi", description="sizeLimit of the memory-backed emptyDir.")
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


def mutate(view: WorkloadView, settings: Settings) -> bool:
    changed = False
    for template in view.gpu_templates:
        needing = [
            c for c in template.gpu_containers
            if not any(str(m.get("mountPath", "")).rstrip("/") == settings.mount_path for m in c.mounts())
        ]
        if not needing:
            continue
        name = _volume_name(template, settings)
        volumes = child_list(template.spec, "volumes")
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
    description="Mounts a memory-backed emptyDir with a sizeLimit at /dev/shm in GPU containers that have "
    "none.",
    rationale="PyTorch DataLoader workers share batches through /dev/shm; on the 64 MiB default they die "
    "with a bus error hours into a run.",
    example="""\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/example/train:1
        resources:
          limits: {nvidia.com/gpu: 1}
        volumeMounts:
        - {name: dshm, mountPath: /dev/shm}
      volumes:
      - name: dshm
        emptyDir: {medium: Memory, sizeLimit: 16Gi}
""",
)
