"""workload-class: users may say what their workload is; a declaration that lowers a check pays a price.

What a workload is comes from its kind's purpose first (``gpuguard.workloads.lifecycle``): work that
runs to completion is training, a long-running service a server, a Notebook a notebook.  A user may
declare the class with the label ``gpuguard.io/workload-class`` (training, inference, batch-inference,
notebook, smoke-test) where the kind alone is wrong: an RL post-training RayCluster declares training,
an evaluation Job batch-inference.  A declaration that raises the checks is always honoured; one that
lowers them only where a price bounds the risk: ``smoke-test`` and ``batch-inference`` on kinds with a
deadline, which ``job-limits`` caps for the class.  Elsewhere the label lowers nothing, and this
policy says so (a warning), so nobody believes a check was waived that wasn't.

Privilege is not a class: only the namespace's profile lets a server preempt (``allowEscalationTo``:
[inference]); a server elsewhere is still judged as a server, with the non-preempting priority class.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.lifecycle import carries_deadline
from gpuguard.workloads.view import WORKLOAD_CLASS_LABEL, WORKLOAD_CLASSES, WorkloadView


class Settings(PolicySettings):
    allow_escalation_to: list[str] = Field(
        default_factory=list, description="Classes this namespace lets preempt (set per namespace profile: "
        "[inference] for a serving team's namespace, whose servers then get inference-critical); elsewhere "
        "servers get the non-preempting inference-standard. Checks never depend on it.")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    declared = view.labels.get(WORKLOAD_CLASS_LABEL)
    path = ("metadata", "labels", WORKLOAD_CLASS_LABEL)
    if declared is not None and declared not in WORKLOAD_CLASSES:
        yield Finding(path, f"unknown workload class {declared!r}",
                      f"use one of {', '.join(WORKLOAD_CLASSES)}, or remove the label")
        return
    note = view.reading.declaration_note if view.reading is not None else ""
    if declared is not None and note and view.is_gpu:
        # kubectl shows about 256 characters of a warning: what the label did (nothing) first.
        fix = "declare batch-inference or smoke-test, or remove the label" if carries_deadline(view.kind) else \
            "remove the label, or run the work as a kind with a deadline (a Job) and declare it there"
        yield Finding(path, f"{note}; judged as {view.workload_class}", fix, advisory=True)


POLICY = ValidatingPolicy(
    id="workload-class",
    title="Declared workload classes stay within the namespace's priority",
    settings_model=Settings,
    run=validate,
    description="Lets users declare what a workload is (label `gpuguard.io/workload-class`: training, inference, "
    "batch-inference, notebook, smoke-test). Raising the checks is always honoured; smoke-test and batch-inference "
    "lower them only on kinds with a deadline (job-limits caps it for the class); elsewhere the label lowers "
    "nothing and this policy warns. Unknown classes are denied. Preemption is granted per namespace "
    "(`allowEscalationTo`), never by a label.",
    rationale="The kind's class is sometimes wrong (a batch-inference RayJob, an RL post-training RayCluster); a "
    "label fixes the checks, but no label may skip a check without a deadline that bounds the loss, or buy "
    "preemption.",
    # A declared class changes nothing on a CPU object (priority-class is GPU-only unless switched).
    cpu_scope=accelerator_objects_only,
)
