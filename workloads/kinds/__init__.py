"""The workload kinds gpuguard understands: everything about a kind, in one ``KindSpec`` each.

One table drives everything that needs to know about kinds: the workload view (where the
pod templates are and how many pods each makes), the policies (where TTL, deadline and
retry fields live, how the kind gangs, where it keeps a priority class or volume claims
outside its pods, whether it is a bare Pod), the webhook configuration generator (which
group/resource to intercept, and where CEL finds the pod specs), the trusted controllers
(which operator creates what from the kind) and the audit ``--cluster`` lister (what to
list).  Policies never compare kind names: they ask the ``KindSpec`` through the workload
view.  The entries live with their operator family (``core``, ``kubeflow``, ``trainer``,
``jobset``, ``volcano``, ``lws``, ``ray``, ``kserve``, ``knative``, ``appwrapper``, ``spark``, ``argo``, and the serving
operators ``dynamo``, ``nim``, ``aibrix``, ``vllm``, ``kubeai``);
this module assembles them.  Adding a kind: ``docs/contributing.md``.

Dispatch is on API group + kind, never on the version: operators move their CRDs between
versions (Kubeflow v1 -> v2, MPIJob v1 -> v2beta1, JobSet v1alpha2) while the fields
gpuguard reads stay where they were, so one entry serves every version listed in
``versions`` (which only the webhook rules and the cluster lister use).  Two kinds may share a
name in different groups (``batch`` Job and Volcano's ``batch.volcano.sh`` Job), which is why
nothing may dispatch on the name alone.
"""

from __future__ import annotations

from typing import Any

from gpuguard.workloads.kinds import (
    aibrix,
    argo,
    core,
    dynamo,
    jobset,
    knative,
    kserve,
    kubeai,
    kubeflow,
    lws,
    nim,
    ray,
    spark,
    trainer,
    vllm,
    volcano,
)
from gpuguard.workloads.kinds.appwrapper import appwrapper
from gpuguard.workloads.kinds.spec import (
    POD_CONTAINER_LISTS,
    Creates,
    Gang,
    JobFields,
    KindSpec,
    Operator,
    PathPattern,
    TemplateRef,
    TemplateSource,
    VolumeClaims,
    runtime_of,
)
from gpuguard.workloads.paths import get_path

__all__ = [
    "KINDS", "POD_CONTAINER_LISTS", "TEMPLATE_HOLDERS", "Creates", "Gang", "JobFields", "KindSpec", "Operator",
    "PathPattern",
    "TemplateRef", "TemplateSource", "VolumeClaims", "all_kinds", "by_resource", "configure", "get_path", "group_of",
    "is_builtin", "lookup", "lookup_group_kind", "runtime_of",
]


def group_of(api_version: Any) -> str:
    """``batch/v1`` -> ``batch``; ``v1`` -> ``""`` (the core group)."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def lookup(api_version: Any, kind: Any) -> KindSpec | None:
    """The KindSpec of an object, by its ``apiVersion`` and ``kind``; ``None`` for kinds gpuguard leaves alone."""
    if not isinstance(kind, str):
        return None
    return lookup_group_kind(group_of(api_version), kind)


def by_resource(group: str, plural: str) -> KindSpec | None:
    """The KindSpec for an API resource (``apps``, ``deployments``): subresource requests name it."""
    return _BY_GROUP_PLURAL.get((group, plural)) or _configured_plural.get((group, plural))


def lookup_group_kind(group: str, kind: str) -> KindSpec | None:
    """The KindSpec for an API group and kind (as ownerReferences name them)."""
    return _BY_GROUP_KIND.get((group, kind)) or _configured.get((group, kind))


def configure(extra: tuple[KindSpec, ...]) -> None:
    """Make the config's own kinds (``kinds:``) known to every reader, after the built-in table.

    The process's config decides (the server, the scan and the CLI each load one); building an engine
    for another config replaces them.  A configured kind never shadows a built-in one (the config refuses it).
    """
    global _configured, _configured_plural, _extra
    _extra = tuple(k for k in extra if k.api_group_kind not in _BY_GROUP_KIND)
    _configured = {k.api_group_kind: k for k in _extra}
    _configured_plural = {(k.group, k.plural): k for k in _extra}


def all_kinds() -> tuple[KindSpec, ...]:
    """The built-in kinds, then the configured ones: what the webhook rules, the scan and the lister cover."""
    return KINDS + _extra


def is_builtin(group: str, kind: str) -> bool:
    return (group, kind) in _BY_GROUP_KIND


# The order is the webhook rules' and the matchConditions' order (generated files follow it).
KINDS: tuple[KindSpec, ...] = (
    core.POD, core.JOB, core.CRONJOB, core.DEPLOYMENT, core.STATEFULSET, core.REPLICASET, core.DAEMONSET,
    kubeflow.PYTORCHJOB, kubeflow.TFJOB, kubeflow.MPIJOB, kubeflow.XGBOOSTJOB, kubeflow.PADDLEJOB, kubeflow.JAXJOB,
    kubeflow.NOTEBOOK,
    jobset.JOBSET,
    volcano.VOLCANO_JOB,
    ray.RAYJOB, ray.RAYCLUSTER,
    lws.LEADERWORKERSET,
    kserve.INFERENCESERVICE,
    trainer.TRAINJOB,
    appwrapper(lookup),
    kserve.LLMINFERENCESERVICE,
    ray.RAYSERVICE, ray.RAYCRONJOB,
    spark.SPARKAPPLICATION, spark.SCHEDULEDSPARKAPPLICATION,
    argo.WORKFLOW, argo.WORKFLOWTEMPLATE, argo.CRONWORKFLOW,
    dynamo.DYNAMOGRAPHDEPLOYMENT, dynamo.DYNAMOCOMPONENTDEPLOYMENT, nim.NIMSERVICE,
    aibrix.STORMSERVICE, aibrix.ROLESET, aibrix.PODSET, vllm.VLLMRUNTIME, kubeai.MODEL,
    knative.SERVICE,
)

_BY_GROUP_KIND: dict[tuple[str, str], KindSpec] = {k.api_group_kind: k for k in KINDS}
_BY_GROUP_PLURAL: dict[tuple[str, str], KindSpec] = {(k.group, k.plural): k for k in KINDS}
_configured: dict[tuple[str, str], KindSpec] = {}
_configured_plural: dict[tuple[str, str], KindSpec] = {}
_extra: tuple[KindSpec, ...] = ()
# Kinds that hold pod templates a workload names but run nothing themselves (the runtimes a TrainJob or an
# InferenceService takes its pods from, a core PodTemplate): judged through the workload that names them,
# never reported as unknown workloads.
TEMPLATE_HOLDERS: frozenset[tuple[str, str]] = frozenset(
    {(spec.runtime.group, kind) for spec in KINDS if spec.runtime is not None for kind, _, _ in spec.runtime.resources}
    | {(spec.merged_runtime.group, kind) for spec in KINDS if spec.merged_runtime is not None
       for kind, _, _ in spec.merged_runtime.resources}
    | {("", "PodTemplate")})
