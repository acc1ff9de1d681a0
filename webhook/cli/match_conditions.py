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

Shape: one condition (the apiserver allows 64) that lets subresource requests and kinds
outside the chain through, then gathers the requested kind's pod specs of the new and the
old object into a list (a ``?:`` chain on the resource) and applies one test to each.  Its
cost grows with the size of the expression (see ``build_match_conditions``) and with the
containers and resource names actually present, never with a hidden search.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuguard.workloads.kinds import KINDS, KindSpec

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
    ("ray.io", "RayService"): (("spec", "rayClusterConfig", "headGroupSpec", "template", "spec"),
                               ("spec", "rayClusterConfig", "workerGroupSpecs", "[]", "template", "spec")),
    ("ray.io", "RayCronJob"): (("spec", "jobTemplate", "rayClusterSpec", "headGroupSpec", "template", "spec"),
                               ("spec", "jobTemplate", "rayClusterSpec", "workerGroupSpecs", "[]", "template", "spec"),
                               ("spec", "jobTemplate", "submitterPodTemplate", "spec")),
    ("serving.kserve.io", "LLMInferenceService"): (("spec", "template"), ("spec", "worker"),
                                                   ("spec", "prefill", "template"), ("spec", "prefill", "worker")),
}
# Kinds whose accelerators CEL can't see from the object alone, so they are always sent: KServe
# predictors hold containers under framework keys, an AppWrapper's pod sets are paths in data,
# a TrainJob's templates are in the runtime it names; Spark and Argo below.
ALWAYS_SENT: frozenset[tuple[str, str]] = frozenset({
    ("serving.kserve.io", "InferenceService"), ("workload.codeflare.dev", "AppWrapper"),
    ("trainer.kubeflow.org", "TrainJob"),
    # Spark asks for GPUs in driver/executor ``gpu`` or in sparkConf strings; Argo templates hold
    # containers under ``container``, ``script`` and ``containerSet``, and inherit workflow fields.
    ("sparkoperator.k8s.io", "SparkApplication"), ("sparkoperator.k8s.io", "ScheduledSparkApplication"),
    ("argoproj.io", "Workflow"), ("argoproj.io", "WorkflowTemplate"), ("argoproj.io", "CronWorkflow"),
})
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
    "gpu-tolerations", "inference-on-spot", "job-limits", "shm-volume", "idle-after-finish",
    # A declared class changes nothing on a CPU object (priority-class is GPU-only unless switched).
    "workload-class",
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


def _optional(var: str, steps: tuple[str, ...], default: str) -> str:
    """CEL: the value at ``steps`` below ``var``, or ``default`` when any step is missing.

    Optional field selection (``a.?b.?c.orValue(d)``) is shorter than a ``has()`` per step, and
    the apiserver's evaluation cost grows with the size of the expression.
    """
    if not steps:
        return var
    return f"{var}.?{'.?'.join(steps)}.orValue({default})"


def pod_specs(var: str, pattern: tuple[str, ...]) -> str:
    """CEL: a list of the pod specs at ``pattern`` below object ``var`` (missing ones as ``null``).

    At most one wildcard ("[]" list items, "{}" map values) per pattern: no kind nests two.
    """
    wildcards = [i for i, step in enumerate(pattern) if step in ("[]", "{}")]
    if not wildcards:
        return f"[{_optional(var, pattern, 'null')}]"
    if len(wildcards) > 1:  # pragma: no cover - no kind nests two collections of templates
        raise ValueError(f"pattern {pattern} has more than one wildcard")
    w = wildcards[0]
    prefix, suffix = pattern[:w], pattern[w + 1:]
    if pattern[w] == "[]":
        return f"{_optional(var, prefix, '[]')}.map(x, {_optional('x', suffix, 'null')})"
    base = f"{var}.{'.'.join(prefix)}"
    return f"{_optional(var, prefix, '{}')}.map(k, {_optional(f'{base}[k]', suffix, 'null')})"


def spec_test(patterns: Iterable[str], classes: list[str]) -> str:
    """CEL on pod spec ``s``: DRA resource claims, or a container or init container whose limits name an
    accelerator (limits alone are enough: Kubernetes refuses an extended resource requested without
    a limit, accelerators can't be overcommitted); or a priority class a policy reserves."""
    terms = ["s.?resourceClaims.orValue([]).size() > 0",
             "(s.?containers.orValue([]) + s.?initContainers.orValue([])).exists(c, "
             f"c.?resources.?limits.orValue({{}}).exists(r, {accelerator_test(patterns, 'r')}))"]
    if classes:
        terms.append(f"s.?priorityClassName.orValue('') in {_list(classes)}")
    return " || ".join(terms)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_lit(v) for v in values) + "]"


CONDITION_NAME = "accelerator-objects"


def build_match_conditions(patterns: Iterable[str], scope: CpuScope = CpuScope(),
                           kinds: Iterable[KindSpec] = KINDS) -> list[dict[str, str]]:
    """The matchConditions for both webhooks; ``[]`` (send everything) when a policy needs every object.

    One condition of ~3.4 KB.  Measured through kube-apiserver 1.33 (``bench/apiserver.py``), the
    apiserver's evaluation time grows with the *size* of the conditions, evaluated branches or
    not: a first version with 16 per-kind conditions (64 KB of CEL) cost ~25x the Pod condition
    alone.  So the pod specs of the requested kind are gathered into one list by a ``?:`` chain
    on the resource, and one test is written once and applied to each.
    """
    if scope.everything:
        return []
    patterns = tuple(patterns)
    grouped: dict[tuple[str, tuple[tuple[str, ...], ...]], list[str]] = {}
    for spec in kinds:
        paths = POD_SPEC_PATHS.get((spec.group, spec.kind))
        if paths is None:
            continue  # not in the chain: always sent (see module docstring)
        plurals = grouped.setdefault((spec.group, paths), [])
        if spec.plural not in plurals:
            plurals.append(spec.plural)
    # rk = "plural/group" of the request, computed once (the apiserver's CEL has no cel.bind, so a
    # one-element list's exists() binds it).  Empty request fields are left out of what the
    # apiserver evaluates, so the core group's "" must be guarded.
    resource = "(request.resource.resource + '/' + (has(request.resource.group) ? request.resource.group : ''))"
    guards = [(f"rk in {_list(f'{plural}/{group}' for plural in plurals)}", paths)
              for (group, paths), plurals in grouped.items()]
    every = _list(f"{plural}/{group}" for (group, _), plurals in grouped.items() for plural in plurals)
    chain = "[]"
    for guard, paths in reversed(guards):
        specs = " + ".join(pod_specs("o", path) for path in paths)
        chain = f"({guard}) ? {specs} : {chain}"
    classes = sorted(scope.priority_classes)
    per_object = [f"({chain}).exists(s, s != null && ({spec_test(patterns, classes)}))"]
    if classes:
        per_object += [f"{_optional('o', path, chr(39) * 2)} in {_list(classes)}" for path in OBJECT_PRIORITY_PATHS]
    objects = f"[object, oldObject].exists(o, o != null && ({' || '.join(per_object)}))"
    expression = (f"(has(request.subResource) && request.subResource != '') || "
                  f"[{resource}].exists(rk, !(rk in {every}) || {objects})")
    return [{"name": CONDITION_NAME, "expression": expression}]
