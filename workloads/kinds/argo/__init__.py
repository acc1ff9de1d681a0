"""Argo Workflows (``argoproj.io``): Workflow, WorkflowTemplate and CronWorkflow.

Each template that makes a pod (``container``, ``script``, ``containerSet``) is a pod template, with
as many pods as the workflow runs of it at once (``kinds.argo.workflow``); templates keep their
containers under those keys and inherit workflow fields, which CEL can't follow: the webhook is
called for every object.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from gpuguard.workloads.kinds.argo import workflow as argo
from gpuguard.workloads.kinds.spec import (
    Creates,
    JobFields,
    KindSpec,
    Locate,
    Operator,
    Peak,
    TemplateRef,
    VolumeClaims,
)
from gpuguard.workloads.paths import Path, dicts, get_path

# Argo Workflows (namespace argo; the Helm chart's and the quick-start's service accounts): a
# workflow's step pods, and the Workflows a CronWorkflow starts.
WORKFLOW_CONTROLLER = Operator("argo-workflow-controller",
                               ("system:serviceaccount:argo:argo-workflows-workflow-controller",
                                "system:serviceaccount:argo:argo"))

# Pod fields an Argo template takes from templateDefaults, else from the workflow spec (Argo
# replaces, never merges, a workflow-level value with a template's own).
_SCHEDULING = ("tolerations", "nodeSelector", "affinity", "schedulerName", "priorityClassName")


# The last workflow spec counted (its JSON) and its counts, or its TooLarge: the engine locates an
# object's templates twice (the quantity check on the request's object, the view on its working
# copy) and the view's peak checks the same bounds, and the count is the costly part.  Keyed by
# content, so a copy hits and a changed spec misses.
_last: tuple[bytes, dict[str, int] | argo.TooLarge] | None = None


def _counts(workflow: Any) -> dict[str, int]:
    """``argo.most_at_once(workflow)``, once per workflow content; :class:`argo.TooLarge` past a bound."""
    global _last
    try:
        key: bytes | None = orjson.dumps(workflow, option=orjson.OPT_NON_STR_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        key = None
    last = _last
    if key is None or last is None or last[0] != key:
        try:
            found: dict[str, int] | argo.TooLarge = argo.most_at_once(workflow)
        except argo.TooLarge as exc:
            found = exc
        if key is None:
            last = (b"", found)
        else:
            last = _last = (key, found)
    if isinstance(last[1], argo.TooLarge):
        raise argo.TooLarge(*last[1].args)  # a fresh one: re-raising the cached one would grow its traceback
    return last[1]


def _argo_at(prefix: Path) -> Locate:
    """An Argo WorkflowSpec at ``prefix``: its pod-making templates."""
    inherits = tuple((key, prefix + ("templateDefaults", key)) for key in _SCHEDULING) + tuple(
        (key, prefix + ("podPriorityClassName" if key == "priorityClassName" else key,)) for key in _SCHEDULING)

    def locate(obj: dict) -> Iterator[TemplateRef]:
        workflow = get_path(obj, prefix)
        try:
            counts = _counts(workflow)  # every template's, in one walk
        except argo.TooLarge:
            counts = {}  # one pod each here; the view's peak (_peak_at) refuses the workflow
        for i, template in dicts(get_path(workflow, ("templates",))):
            if not argo.is_pod_template(template):
                continue
            given = template.get("name")
            name = given if isinstance(given, str) else f"template-{i}"
            base = prefix + ("templates", i)
            yield TemplateRef(name, base, base + ("metadata",), counts.get(name, 1),
                              container_keys=("container", "script"),
                              container_lists=(("initContainers",), ("sidecars",), ("containerSet", "containers")),
                              volume_paths=(base + ("volumes",), prefix + ("volumes",)), inherits=inherits)

    return locate


def _peak_at(prefix: Path) -> Peak:
    """The heaviest moment's pods, after checking the bounds the per-template counts need too (so a
    workflow the locator could only count one pod per template is refused, not under-counted)."""

    def peak(obj: dict, weight: argo.Weight) -> dict[str, int]:
        workflow = get_path(obj, prefix)
        _counts(workflow)
        return argo.peak(workflow, weight)

    return peak


def _argo_kind(kind: str, plural: str, prefix: Path, creates: tuple[str, ...]) -> KindSpec:
    """An Argo Workflows kind holding a WorkflowSpec at ``prefix``: its TTL is ``ttlStrategy`` (which
    deletes the finished workflow and, through it, its pods), its deadline the whole workflow's."""
    return KindSpec("argoproj.io", kind, plural, ("v1alpha1",), "training", _argo_at(prefix),
                    JobFields(ttl=prefix + ("ttlStrategy", "secondsAfterCompletion"),
                              ttl_variants=(prefix + ("ttlStrategy", "secondsAfterSuccess"),
                                            prefix + ("ttlStrategy", "secondsAfterFailure")),
                              deadline=prefix + ("activeDeadlineSeconds",)),
                    priority_class_paths=(prefix + ("podPriorityClassName",),
                                          prefix + ("templateDefaults", "priorityClassName")),
                    volume_claims=VolumeClaims(prefix + ("volumeClaimTemplates",), "claim-templates"),
                    peak=_peak_at(prefix),
                    controllers=(Creates(WORKFLOW_CONTROLLER, creates),) if creates else ())


WORKFLOW = _argo_kind("Workflow", "workflows", ("spec",), ("Pod",))
WORKFLOWTEMPLATE = _argo_kind("WorkflowTemplate", "workflowtemplates", ("spec",), ())
CRONWORKFLOW = _argo_kind("CronWorkflow", "cronworkflows", ("spec", "workflowSpec"), ("argoproj.io/Workflow",))
