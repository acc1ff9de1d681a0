"""Volcano's Job (``batch.volcano.sh``): tasks, each a pod template run ``replicas`` times, ganged by
Volcano's own scheduler.  It shares the name ``Job`` with the batch Job: nothing dispatches on the name."""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, Gang, JobFields, KindSpec, Operator, TemplateRef, VolumeClaims
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, get_path

# Volcano (volcano-system): a Volcano Job's task pods.
VOLCANO_CONTROLLERS = Operator("volcano-controllers", ("system:serviceaccount:volcano-system:volcano-controllers",))


def _volcano(obj: dict) -> Iterator[TemplateRef]:
    tasks = get_path(obj, ("spec", "tasks"))
    if not isinstance(tasks, list):
        return
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        base: Path = ("spec", "tasks", i, "template")
        yield TemplateRef(str(task.get("name", i)), base + ("spec",), base + ("metadata",), count(task.get("replicas")))


# Volcano's webhook allows changing only the tasks' replicas.
VOLCANO_JOB = KindSpec("batch.volcano.sh", "Job", "jobs", ("v1alpha1",), "training", _volcano,
                       JobFields(ttl=("spec", "ttlSecondsAfterFinished"), backoff=("spec", "maxRetry")),
                       gang=Gang(own_scheduler=("spec", "schedulerName"), min_available=("spec", "minAvailable")),
                       priority_class_paths=(("spec", "priorityClassName"),),
                       volume_claims=VolumeClaims(("spec", "volumes"), "volcano-volumes"),
                       immutable=(("spec", "tasks"),),
                       pod_spec_paths=(("spec", "tasks", "[]", "template", "spec"),),
                       controllers=(Creates(VOLCANO_CONTROLLERS, ("Pod",)),))
