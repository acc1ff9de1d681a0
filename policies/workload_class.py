"""workload-class: users may say what their workload is, but not buy a higher priority by saying it.

The kind gives a default class (a RayJob is training, a RayCluster serving), and the kind is
often wrong: a RayJob that runs batch inference needs no checkpoints, an RL post-training
RayCluster is training.  So a user may declare the class with the label
``gpuguard.io/workload-class`` (training, inference, batch-inference, notebook, smoke-test) and
gets that class's checks and defaults.

What a declaration must not do is escalate: the class also chooses the priority class
(``priority-class``), and the inference class preempts other teams' pods.  The rule: a
declaration is accepted when its class ranks no higher than the class the kind gives
(``rank``: inference above training, batch-inference and smoke-test, above notebook), or when
the namespace's profile lists it in ``allowEscalationTo`` (a serving team's namespace may let a
RayCluster or a Job declare ``inference``).  Anything else is denied with the way out, so a user
can correct a wrong class without an admin, and cannot get preemption by a label.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.view import WORKLOAD_CLASS_LABEL, WORKLOAD_CLASSES, WorkloadView


class Settings(PolicySettings):
    rank: dict[str, int] = Field(
        default_factory=lambda: {"inference": 3, "training": 2, "batch-inference": 2, "smoke-test": 2,
                                 "notebook": 1},
        description="Priority rank of each class (the order of the priority classes priority-class assigns).")
    allow_escalation_to: list[str] = Field(
        default_factory=list, description="Classes a declaration may reach even when they outrank the kind's "
        "class (set per namespace profile, e.g. [inference] for a serving team).")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    labels = view.labels
    declared = labels.get(WORKLOAD_CLASS_LABEL)
    if declared is None:
        return
    path = ("metadata", "labels", WORKLOAD_CLASS_LABEL)
    if declared not in WORKLOAD_CLASSES:
        yield Finding(path, f"unknown workload class {declared!r}",
                      f"use one of {', '.join(WORKLOAD_CLASSES)}, or remove the label")
        return
    base = view.kind_class
    if declared == base or declared in settings.allow_escalation_to:
        return
    ceiling = settings.rank.get(base, 0)
    if settings.rank.get(declared, 0) > ceiling:
        allowed = ", ".join(c for c in WORKLOAD_CLASSES if settings.rank.get(c, 0) <= ceiling)
        yield Finding(path, f"declaring {declared!r} would give this {view.kind.kind} (a {base} workload by kind) "
                      f"a higher priority than its kind allows in this namespace",
                      f"declare one of {allowed}, or ask an admin to allow {declared!r} in this namespace's profile "
                      "(workload-class: allowEscalationTo)")


POLICY = ValidatingPolicy(
    id="workload-class",
    title="Declared workload classes stay within the namespace's priority",
    settings_model=Settings,
    run=validate,
    description="Lets users declare what a workload is (label `gpuguard.io/workload-class`: training, inference, "
    "batch-inference, notebook, smoke-test) and denies a declaration that would raise its priority above its kind's "
    "class unless the namespace's profile allows it.",
    rationale="The kind's class is often wrong (a batch-inference RayJob, an RL-training RayCluster); a label "
    "fixes the checks, but must not buy the preempting inference priority.",
    # A declared class changes nothing on a CPU object (priority-class is GPU-only unless switched).
    cpu_scope=accelerator_objects_only,
)
