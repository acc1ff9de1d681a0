"""priority-abuse: only inference may use the inference priority class.

The inference class preempts: a training job or notebook that borrows it evicts serving
pods (and other teams' training) to get its GPUs.  Checked on every place a kind keeps a
priority class: pod templates and the kind's ``priority_class_paths`` (Kubeflow
``runPolicy.schedulingPolicy.priorityClass``, Volcano ``spec.priorityClassName``).  The class is
the engine's (``gpuguard.workloads.lifecycle``), and a reserved class preempts, which only a
namespace's profile grants (workload-class ``allowEscalationTo``): a server in a namespace that
does not grant inference may not use it either.  A DaemonSet may never use a reserved class.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import CpuScope, Finding, PolicySettings, ValidatingPolicy
from gpuguard.workloads.classify import relabel
from gpuguard.workloads.view import WorkloadView


class Settings(PolicySettings):
    reserved: dict[str, list[str]] = Field(
        default_factory=lambda: {"inference-critical": ["inference"]},
        description="PriorityClass -> workload classes allowed to use it.")


def _uses(view: WorkloadView) -> Iterator[tuple[tuple, str]]:
    for template in view.templates:
        name = template.spec.get("priorityClassName")
        if isinstance(name, str):
            yield template.spec_path + ("priorityClassName",), name
    yield from view.kind_priority_classes()  # e.g. Kubeflow runPolicy, Volcano spec (workloads/kinds/)


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    for path, name in _uses(view):
        allowed = settings.reserved.get(name)
        if allowed is not None and view.kind.per_node:
            yield Finding(path, f"a {view.kind.kind} uses priority class {name}, reserved for {' and '.join(allowed)}: "
                          "it would preempt pods on every node it runs on",
                          "remove priorityClassName (gpuguard sets a non-preempting class)")
        elif allowed is not None and view.workload_class in allowed and not view.may_preempt:
            yield Finding(path, f"{view.workload_class} workload uses priority class {name}, which preempts: this "
                          "namespace does not grant preemption",
                          "remove priorityClassName (gpuguard sets the non-preempting inference-standard), or ask "
                          "an admin to grant it in this namespace's profile (workload-class: allowEscalationTo: "
                          f"[{view.workload_class}])")
        elif allowed is not None and view.workload_class not in allowed:
            yield Finding(path, f"{view.workload_class} workload uses priority class {name}, reserved for "
                          f"{' and '.join(allowed)}: it would preempt serving pods",
                          "remove priorityClassName (gpuguard sets the class for its workload class) or use "
                          "training-standard / notebook-dev; "
                          + relabel(view.workload_class, tuple((c, "where this namespace's profile grants it")
                                                               for c in allowed)))


def cpu_scope(settings: Settings) -> CpuScope:
    """Any object using a reserved class, accelerators or not: a CPU pod may borrow the inference class too."""
    return CpuScope(priority_classes=frozenset(settings.reserved))


POLICY = ValidatingPolicy(
    id="priority-abuse",
    title="Inference priority is for inference",
    settings_model=Settings,
    run=validate,
    description="Rejects training and notebook workloads that use a priority class reserved for inference, and "
    "servers that use it where the namespace's profile does not grant preemption.",
    rationale="The inference class preempts: a training job that borrows it evicts model servers to take "
    "their GPUs.",
    cpu_scope=cpu_scope,
)
