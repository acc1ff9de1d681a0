"""workload-class: users may say what their workload is, but privilege comes only from the namespace.

The class is read from what a workload does (``gpuguard.workloads.classify``: its commands, images
and ports, its kind the last hint), and that reading can be wrong: a RayJob whose entrypoint names
nothing may run batch inference, a RayCluster from a generic image RL post-training.  So a user may
declare the class with the label
``gpuguard.io/workload-class`` (training, inference, batch-inference, notebook, smoke-test) and
gets that class's checks and defaults.

Two classes carry privilege (``PRIVILEGED_CLASSES`` in ``gpuguard.workloads.view``): inference
preempts other teams' pods (``priority-class``) and, like notebook, skips the checkpoint and
deadline checks.  Neither a kind nor a label gives one: the namespace's profile must grant it in
``allowEscalationTo`` (a serving team's namespace grants ``inference``, a notebook namespace
``notebook``).  The engine decides the class once (``effective_class``); this policy says so: a
declaration of a class the namespace does not grant is denied with the way out, and a workload
whose work (or kind) asks for one is judged as training, with a warning naming the grant it lacks.
The other classes keep every check that bounds a loss (deadline, retries), so any workload may declare
them.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.classify import infer
from gpuguard.workloads.view import WORKLOAD_CLASS_LABEL, WORKLOAD_CLASSES, WorkloadView, effective_class


class Settings(PolicySettings):
    allow_escalation_to: list[str] = Field(
        default_factory=list, description="Privileged classes this namespace grants, asked for by kind or by "
        "label (set per namespace profile: [inference] for a serving team, [notebook] for notebooks); elsewhere "
        "such workloads are judged as training.")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    granted = frozenset(settings.allow_escalation_to)
    declared = view.labels.get(WORKLOAD_CLASS_LABEL)
    path = ("metadata", "labels", WORKLOAD_CLASS_LABEL)
    grant = "ask an admin to grant {0!r} in this namespace's profile (workload-class: allowEscalationTo: [{0}])"
    if declared is not None and declared not in WORKLOAD_CLASSES:
        yield Finding(path, f"unknown workload class {declared!r}",
                      f"use one of {', '.join(WORKLOAD_CLASSES)}, or remove the label")
        return
    if declared is not None:
        if effective_class(declared, granted) != declared:
            yield Finding(path, f"declaring {declared!r} would give this {view.kind.kind} "
                          f"{_privilege(declared)}, which this namespace does not grant",
                          f"declare one of {', '.join(c for c in WORKLOAD_CLASSES if effective_class(c, granted) == c)}"
                          f", or {grant.format(declared)}")
        return
    wanted = view.kind_class
    if view.is_gpu and view.workload_class != wanted and effective_class(wanted, granted) != wanted:
        reason = infer(view.obj, view.kind, wanted).reason
        # kubectl shows about 256 characters of a warning: what asked for the class and the label first.
        yield Finding(path, f"this {view.kind.kind} is judged as {view.workload_class}: it asks for {wanted!r} "
                      f"({reason}), not granted here",
                      f"if it is something else, label it {WORKLOAD_CLASS_LABEL}: batch-inference, smoke-test or "
                      f"training; or {grant.format(wanted)} ({_privilege(wanted)})", advisory=True)


def _privilege(workload_class: str) -> str:
    if workload_class == "inference":
        return "preemption and no checkpoint or deadline checks"
    return "no checkpoint or deadline checks"


POLICY = ValidatingPolicy(
    id="workload-class",
    title="Declared workload classes stay within the namespace's priority",
    settings_model=Settings,
    run=validate,
    description="Lets users declare what a workload is (label `gpuguard.io/workload-class`: training, inference, "
    "batch-inference, notebook, smoke-test); the privileged classes (inference: preemption, and notebook: no "
    "checkpoint or deadline checks) only where the namespace's profile grants them (`allowEscalationTo`), by kind "
    "or by label: a declaration of another is denied, a kind asking for one is judged as training, with a warning.",
    rationale="The kind's class is often wrong (a batch-inference RayJob, a 64-GPU training StatefulSet); a label "
    "fixes the checks, but neither a kind nor a label may buy preemption or skip the checks that bound a loss.",
    # A declared class changes nothing on a CPU object (priority-class is GPU-only unless switched).
    cpu_scope=accelerator_objects_only,
)
