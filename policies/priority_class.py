"""priority-class: a priorityClassName by workload class, where the user set none.

Inference serves users and should preempt; training queues; notebooks yield.  Which class a
workload has is the engine's decision (``gpuguard.workloads.lifecycle``: a server is a server
everywhere), but preempting is a privilege: a server gets the preempting class only where its
namespace's profile grants inference, elsewhere the class of ``withoutPreemption`` (ahead of
training in the queue, evicting nobody); a DaemonSet never gets a preempting class.  On a bare
Pod the apiserver's Priority plugin has already set ``spec.priority`` (from the global
default) before the webhook runs, and it re-runs after a webhook mutates and refuses a
Pod whose ``spec.priority`` disagrees with its class, so the stale value is dropped.  The
same holds for ``spec.preemptionPolicy`` (seen against a real 1.33 apiserver: "the string
value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec").  A pod
*template* that carries them (``priority: 0`` copied from a live pod) is dropped too: every
pod its controller creates would otherwise be refused by the same plugin.  A template that already names
a class loses them as well: what the plugin computes from the class is what they say or a refusal, and a
re-apply that merges the manifest's ``priority`` with the stored class would otherwise change an immutable
Job template on every reconcile.
"""

from __future__ import annotations

from pydantic import Field

from gpuguard.policies.base import CpuScope, MutatingPolicy, PolicySettings, cpu_objects_if
from gpuguard.workloads.paths import Replaced
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    classes: dict[str, str] = Field(
        default_factory=lambda: {"inference": "inference-critical", "training": "training-standard",
                                 "batch-inference": "training-standard", "smoke-test": "training-standard",
                                 "notebook": "notebook-dev"},
        description="Workload class -> PriorityClass name.")
    without_preemption: dict[str, str] = Field(
        default_factory=lambda: {"inference": "inference-standard"},
        description="Workload class -> the non-preempting PriorityClass it gets where its namespace's profile "
        "does not grant it preemption (workload-class allowEscalationTo), and on a DaemonSet.")
    gpu_only: bool = Field(True, description="Only set it on workloads that request GPUs.")


def mutate(view: WorkloadView, settings: Settings) -> bool:
    if settings.gpu_only and not view.is_gpu:
        return False
    # A DaemonSet runs a pod on every matching node: a preempting class would evict whatever runs
    # there, so it gets the non-preempting class whatever its workload class.
    preempts = view.may_preempt and not view.kind.per_node
    name = None if preempts else settings.without_preemption.get(view.workload_class)
    name = name or settings.classes.get(view.workload_class)
    if not name:
        return False
    changed = False
    for template in view.templates:
        if template.spec.get("priorityClassName"):
            # A class already named (the user's, or the one gpuguard set, brought back by a re-apply's merge with
            # the stored object): a template's priority beside it is what the Priority plugin computes from the
            # class anyway, or one it refuses every pod for.  Dropped, so a re-apply of a manifest that sets it
            # leaves an immutable Job template as stored instead of failing "field is immutable".
            if not view.kind.is_pod:
                changed = _drop_computed(view, template) or changed
            continue
        template.spec["priorityClassName"] = name
        _drop_computed(view, template)
        changed = True
    return changed


def _drop_computed(view: WorkloadView, template: PodTemplate) -> bool:
    """Drop ``priority``/``preemptionPolicy``, which the apiserver computes from the class; recorded on templates
    (on a bare Pod the apiserver's Priority admission wrote them, not the user)."""
    dropped_any = False
    for key in ("priority", "preemptionPolicy"):
        dropped = template.spec.pop(key, None)
        if dropped is not None and not view.kind.is_pod:
            view.changes.append(Replaced((*template.spec_path, key), dropped, None, "removed"))
        dropped_any = dropped_any or dropped is not None
    return dropped_any


def cpu_scope(settings: Settings) -> CpuScope:
    """CPU workloads too when ``gpuOnly`` is off."""
    return cpu_objects_if(not settings.gpu_only)


POLICY = MutatingPolicy(
    id="priority-class",
    title="Priority class by workload class",
    settings_model=Settings,
    run=mutate,
    description="Sets `priorityClassName` by workload class (`inference-critical` where the namespace grants "
    "inference preemption, else the non-preempting `inference-standard`; `training-standard` for training, "
    "batch inference and smoke tests; `notebook-dev`) where absent, and drops `spec.priority` and "
    "`spec.preemptionPolicy` there (pod or template), and from any template that names a class, so the apiserver "
    "recomputes them (a re-apply that brings them back leaves an immutable Job template as stored).",
    rationale="Without classes a notebook can hold the GPUs a production model server needs, and nothing "
    "tells the scheduler which pod to preempt.",
    cpu_scope=cpu_scope,
    writes=("priorityClassName", "priority", "preemptionPolicy"),
)
