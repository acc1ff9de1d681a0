"""CEL ``matchConditions`` that keep objects without accelerators away from the webhook.

Why: with ``failurePolicy: Fail`` every request the webhook is asked about waits for it, so
when gpuguard is down nothing it intercepts can be created.  gpuguard changes and refuses
nothing on an object that asks for no accelerator, so the apiserver need not call it for
one: these conditions let through only objects that can carry accelerators — an extended
resource matching the accelerator patterns in the limits of any container (app, init, native
sidecar; ephemeral containers may not have resources) of any pod template of the kind, or
any DRA ``resourceClaims`` — in the new *or* the old object
(an UPDATE that removes a GPU is still judged), every subresource request the rules send
(``scale``: its object is an ``autoscaling/v1`` Scale), kinds whose templates this module
can't describe in CEL (KServe predictors embed model-specific containers), and what a
policy configured to touch CPU objects needs (``cpu_scope``).  If such a policy needs every
object, no conditions are emitted at all.

Shape: the apiserver ANDs matchConditions, so each condition is an implication "if the
request is for these resources, then the object must carry accelerators"; requests for
other resources pass it trivially.  One condition per group of resources sharing template
paths keeps the count (limit 64) and each expression's cost small: the cost grows with the
containers and resource names actually present, never with a hidden search.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhook.kinds import KINDS, KindSpec

MAX_MATCH_CONDITIONS = 64  # the apiserver's limit per webhook

# Where each kind keeps its pod specs, as path patterns: a field name, "[]" (each list item)
# or "{}" (each map value).  A unit test checks every pattern against ``KindSpec.locate``.
# Kinds missing here are always sent to the webhook.
POD_SPEC_PATHS: dict[tuple[str, str], tuple[tuple[str, ...], ...]] = {
    ("", "Pod"): (("spec",),),
    ("batch", "Job"): (("spec", "template", "spec"),),
    ("batch", "CronJob"): (("spec", "jobTemplate", "spec", "template", "spec"),),
    ("apps", "Deployment"): (("spec", "template", "spec"),),
    ("apps", "StatefulSet"): (("spec", "template", "spec"),),
    ("apps", "ReplicaSet"): (("spec", "template", "spec"),),
    ("apps", "DaemonSet"): (("spec", "template", "spec"),),
    ("kubeflow.org", "PyTorchJob"): (("spec", "pytorchReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "TFJob"): (("spec", "tfReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "MPIJob"): (("spec", "mpiReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "XGBoostJob"): (("spec", "xgbReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "PaddleJob"): (("spec", "paddleReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "JAXJob"): (("spec", "jaxReplicaSpecs", "{}", "template", "spec"),),
    ("kubeflow.org", "Notebook"): (("spec", "template", "spec"),),
    ("jobset.x-k8s.io", "JobSet"): (("spec", "replicatedJobs", "[]", "template", "spec", "template", "spec"),),
    ("batch.volcano.sh", "Job"): (("spec", "tasks", "[]", "template", "spec"),),
    ("ray.io", "RayJob"): (("spec", "rayClusterSpec", "headGroupSpec", "template", "spec"),
                           ("spec", "rayClusterSpec", "workerGroupSpecs", "[]", "template", "spec"),
                           ("spec", "submitterPodTemplate", "spec")),
    ("ray.io", "RayCluster"): (("spec", "headGroupSpec", "template", "spec"),
                               ("spec", "workerGroupSpecs", "[]", "template", "spec")),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec"),
        ("spec", "leaderWorkerTemplate", "workerTemplate", "spec")),
}
# Object-level (not per-template) fields where priority-abuse finds a priority class.
OBJECT_PRIORITY_PATHS = (("spec", "priorityClassName"), ("spec", "runPolicy", "schedulingPolicy", "priorityClass"))


# ---------------------------------------------------------------- which CPU objects policies need

@dataclass(frozen=True)
class CpuScope:
    """CPU-only objects some enabled policy must still see: all of them, or those using these classes."""

    everything: bool = False
    priority_classes: frozenset[str] = frozenset()
    reason: str = ""


# Policies that look at accelerator objects only, whatever their settings.
ACCELERATOR_ONLY = frozenset({
    "checkpoint-volume", "ephemeral-storage", "gang-scheduling", "gpu-memory-guard", "gpu-request-shape",
    "gpu-tolerations", "inference-on-spot", "job-limits", "shm-volume",
})
# Policies that touch CPU objects when a setting says so.
CPU_SWITCHES: dict[str, Callable[[Any], bool]] = {
    "default-resources": lambda s: bool(getattr(s, "apply_to_non_gpu_pods", False)),
    "job-ttl": lambda s: not getattr(s, "gpu_only", True),
    "priority-class": lambda s: not getattr(s, "gpu_only", True),
    "gpu-node-affinity": lambda s: bool(getattr(s, "keep_non_gpu_pods_off", False)),
}


def cpu_scope(config: Any) -> CpuScope:
    """What the enabled policies (base config and every profile) need to see of CPU-only objects.

    A policy gpuguard does not know (a new or custom one) is assumed to need everything: a
    webhook that misses objects a policy should judge is worse than one called too often.
    """
    classes: set[str] = set()
    sets = [config.policies, *(p.policies for p in getattr(config, "profiles", ()))]
    for policy_set in sets:
        for policy, settings in (*policy_set.mutating, *policy_set.validating):
            if policy.id in ACCELERATOR_ONLY:
                continue
            if policy.id in CPU_SWITCHES:
                if CPU_SWITCHES[policy.id](settings):
                    return CpuScope(everything=True, reason=f"{policy.id} is configured to act on CPU objects")
                continue
            if policy.id == "priority-abuse":
                classes.update(getattr(settings, "reserved", {}) or {})
                continue
            return CpuScope(everything=True, reason=f"policy {policy.id} may act on CPU objects")
    return CpuScope(priority_classes=frozenset(classes))


# ---------------------------------------------------------------- CEL

def _lit(text: str) -> str:
    """A CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _glob_regex(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")


def accelerator_test(patterns: Iterable[str], var: str) -> str:
    """CEL: resource name ``var`` matches one of the accelerator globs (one anchored RE2 regex)."""
    alternatives = "|".join(_glob_regex(p) for p in patterns)
    return f"{var}.matches({_lit('^(' + alternatives + ')$')})" if alternatives else "false"


class _Names:
    """Fresh CEL iteration variable names, so nested comprehensions never shadow each other."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"


def _walk(expr: str, steps: tuple[str, ...], leaf: Callable[[str], str], names: _Names) -> str:
    """CEL: some pod spec reached from ``expr`` through ``steps`` satisfies ``leaf``; type-guarded."""
    if not steps:
        return leaf(expr)
    step, rest = steps[0], steps[1:]
    if step == "[]":
        item = names("i")
        return f"(type({expr}) == list && {expr}.exists({item}, {_walk(item, rest, leaf, names)}))"
    if step == "{}":
        key = names("k")
        return f"(type({expr}) == map && {expr}.exists({key}, {_walk(f'{expr}[{key}]', rest, leaf, names)}))"
    return f"(has({expr}.{step}) && {_walk(f'{expr}.{step}', rest, leaf, names)})"


def _accelerator_leaf(patterns: tuple[str, ...], names: _Names) -> Callable[[str], str]:
    """CEL: pod spec ``spec`` has DRA resource claims, or a container or init container whose limits
    name an accelerator.  Limits alone are enough: Kubernetes refuses an extended resource
    requested without a limit (accelerators can't be overcommitted)."""

    def leaf(spec: str) -> str:
        c, r = names("c"), names("r")
        containers = f"(has({spec}.initContainers) ? {spec}.containers + {spec}.initContainers : {spec}.containers)"
        return (f"((has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0) || (has({spec}.containers) && "
                f"{containers}.exists({c}, has({c}.resources) && has({c}.resources.limits) && "
                f"{c}.resources.limits.exists({r}, {accelerator_test(patterns, r)}))))")

    return leaf


def _priority_leaf(classes: list[str]) -> Callable[[str], str]:
    listed = "[" + ", ".join(_lit(c) for c in classes) + "]"

    def leaf(value: str) -> str:
        return f"{value} in {listed}"

    return leaf


def _object_test(obj: str, paths: tuple[tuple[str, ...], ...], patterns: tuple[str, ...],
                 scope: CpuScope, names: _Names) -> str:
    terms = [_walk(obj, path, _accelerator_leaf(patterns, names), names) for path in paths]
    if scope.priority_classes:
        classes = sorted(scope.priority_classes)
        priority_paths = dict.fromkeys([*(path + ("priorityClassName",) for path in paths), *OBJECT_PRIORITY_PATHS])
        terms += [_walk(obj, path, _priority_leaf(classes), names) for path in priority_paths]
    return f"({obj} != null && ({' || '.join(terms)}))"


def _condition_name(group: str, plurals: list[str]) -> str:
    """``accelerators-jobs.batch``; a qualified name of at most 63 characters, stable across runs."""
    first = plurals[0] + (f"-and-{len(plurals) - 1}-more" if len(plurals) > 1 else "")
    return (f"accelerators-{first}" + (f".{group}" if group else ""))[:63].rstrip("-.")


def build_match_conditions(patterns: Iterable[str], scope: CpuScope = CpuScope(),
                           kinds: Iterable[KindSpec] = KINDS) -> list[dict[str, str]]:
    """The matchConditions for both webhooks; ``[]`` (send everything) when a policy needs every object."""
    if scope.everything:
        return []
    patterns = tuple(patterns)
    grouped: dict[tuple[str, tuple[tuple[str, ...], ...]], list[str]] = {}
    for spec in kinds:
        paths = POD_SPEC_PATHS.get((spec.group, spec.kind))
        if paths is None:
            continue  # no condition: always sent (see module docstring)
        plurals = grouped.setdefault((spec.group, paths), [])
        if spec.plural not in plurals:
            plurals.append(spec.plural)
    conditions = []
    for (group, paths), plurals in grouped.items():
        names = _Names()
        resources = "[" + ", ".join(_lit(p) for p in plurals) + "]"
        expression = " || ".join([
            # Empty request fields are left out of the request the apiserver evaluates: guard them.
            f"(has(request.resource.group) ? request.resource.group : '') != {_lit(group)}",
            f"!(request.resource.resource in {resources})",
            "(has(request.subResource) && request.subResource != '')",
            _object_test("object", paths, patterns, scope, names),
            _object_test("oldObject", paths, patterns, scope, names),
        ])
        conditions.append({"name": _condition_name(group, plurals), "expression": expression})
    if len(conditions) > MAX_MATCH_CONDITIONS:  # pragma: no cover - KINDS would need 3x more groups
        raise ValueError(f"{len(conditions)} matchConditions exceed the apiserver's limit of {MAX_MATCH_CONDITIONS}")
    return conditions
