"""CEL ``matchConditions`` that keep objects without accelerators away from the webhook.

Why: with ``failurePolicy: Fail`` every request the webhook is asked about waits for it, so
when gpuguard is down nothing it intercepts can be created.  gpuguard changes and refuses
nothing on an object that asks for no accelerator, so the apiserver need not call it for
one: these conditions let through only objects that can carry accelerators — an extended
resource matching the accelerator patterns in the limits of any container (app, init, native
sidecar; ephemeral containers may not have resources) of any pod template of the kind, or
any DRA ``resourceClaims`` — in the new *or* the old object
(an UPDATE that removes a GPU is still judged), every subresource request the rules send
(``scale``: its object is an ``autoscaling/v1`` Scale), kinds whose pod specs CEL can't
follow (no ``KindSpec.pod_spec_paths``: KServe predictors embed model-specific containers),
and the CPU objects an enabled policy says it may act on (``Policy.cpu_scope``).  If such a
policy needs every object, no conditions are emitted at all.

Shape: one condition (the apiserver allows 64) that lets subresource requests and kinds
outside the chain through, then gathers the requested kind's pod specs of the new and the
old object into a list (a ``?:`` chain on the resource) and applies one test to each.  Its
cost grows with the size of the expression (see ``build_match_conditions``) and with the
containers and resource names actually present, never with a hidden search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpuguard.policies.base import CpuScope
from gpuguard.workloads.controllers import GroupKind
from gpuguard.workloads.kinds import KINDS, KindSpec, PathPattern, lookup_group_kind

MAX_MATCH_CONDITIONS = 64  # the apiserver's limit per webhook
_ACCELERATORS_ONLY = CpuScope()

# ---------------------------------------------------------------- which CPU objects policies need

def cpu_scope(config: Any) -> CpuScope:
    """What the enabled policies (base config and every profile) need to see of CPU-only objects.

    Each policy says it itself (``Policy.cpu_scope``); one that does not is assumed to need
    everything: a webhook that misses objects a policy should judge is worse than one called too often.
    """
    classes: set[str] = set()
    sets = [config.policies, *(p.policies for p in getattr(config, "profiles", ()))]
    for policy_set in sets:
        for policy, settings in (*policy_set.mutating, *policy_set.validating):
            scope = policy.cpu_scope(settings)
            if scope.everything:
                return CpuScope(everything=True, reason=f"{policy.id} {scope.reason}")
            classes.update(scope.priority_classes)
    return CpuScope(priority_classes=frozenset(classes))


# ---------------------------------------------------------------- CEL

def _lit(text: str) -> str:
    """A CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _glob_regex(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")


def accelerator_test(patterns: Iterable[str], var: str) -> str:
    """CEL: resource name ``var`` matches one of the accelerator globs.

    Exact names are one ``in`` test against a list, ``prefix*`` globs a ``startsWith`` each, and only
    other globs a regex: the apiserver evaluates this for every container limit of every object the
    rules send it, and a regex is the most expensive of the three.
    """
    exact: list[str] = []
    terms: list[str] = []
    others: list[str] = []
    for pattern in patterns:
        head = pattern[:-1] if pattern.endswith("*") else None
        if not any(c in pattern for c in "*?["):
            exact.append(pattern)
        elif head is not None and not any(c in head for c in "*?["):
            terms.append(f"{var}.startsWith({_lit(head)})")
        else:
            others.append(pattern)
    if exact:
        terms.insert(0, f"{var} in {_list(exact)}")
    if others:
        alternatives = "|".join(_glob_regex(p) for p in others)
        terms.append(f"{var}.matches({_lit('^(' + alternatives + ')$')})")
    return " || ".join(terms) if terms else "false"


def _optional(var: str, steps: tuple[str, ...], default: str) -> str:
    """CEL: the value at ``steps`` below ``var``, or ``default`` when any step is missing.

    Optional field selection (``a.?b.?c.orValue(d)``) is shorter than a ``has()`` per step, and
    the apiserver's evaluation cost grows with the size of the expression.
    """
    if not steps:
        return var
    return f"{var}.?{'.?'.join(steps)}.orValue({default})"


def pod_specs(var: str, pattern: PathPattern) -> str:
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


def build_match_conditions(patterns: Iterable[str], scope: CpuScope = _ACCELERATORS_ONLY,
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
    grouped: dict[tuple[str, tuple[PathPattern, ...]], list[str]] = {}
    object_paths: set[tuple[str, ...]] = set()
    for spec in kinds:
        if not spec.pod_spec_paths:
            continue  # not in the chain: always sent (see module docstring)
        plurals = grouped.setdefault((spec.group, spec.pod_spec_paths), [])
        if spec.plural not in plurals:
            plurals.append(spec.plural)
        # Object-level fields where priority-abuse finds a priority class (Kubeflow runPolicy, Volcano spec).
        object_paths.update(tuple(str(step) for step in path) for path in spec.priority_class_paths)
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
        per_object += [f"{_optional('o', path, chr(39) * 2)} in {_list(classes)}" for path in sorted(object_paths)]
    objects = f"[object, oldObject].exists(o, o != null && ({' || '.join(per_object)}))"
    expression = (f"(has(request.subResource) && request.subResource != '') || "
                  f"[{resource}].exists(rk, !(rk in {every}) || {objects})")
    return [{"name": CONDITION_NAME, "expression": expression}]


# ---------------------------------------------------------------- blast radius

CONTROLLER_REQUESTS = "not-controller-requests"
METADATA_ONLY_UPDATES = "not-finalizer-only-updates"
MERGED_NAME = "judged-requests"
_SUBRESOURCE = "(has(request.subResource) && request.subResource != '')"
_RESOURCE = "(request.resource.resource + '/' + (has(request.resource.group) ? request.resource.group : ''))"
# The owner's API group, from an ownerReference's apiVersion ("apps/v1" -> "apps", "v1" -> "").
_OWNER_GROUP = ("(r.?apiVersion.orValue('').contains('/') ? "
                "r.apiVersion.substring(0, r.apiVersion.lastIndexOf('/')) : '')")


def _create_keys(creates: Iterable[tuple[str, GroupKind, GroupKind]]) -> list[str]:
    """``user|ownerGroup/OwnerKind|plural/group`` for each edge whose created kind the rules intercept."""
    keys = set()
    for user, (owner_group, owner_kind), (group, kind) in creates:
        spec = lookup_group_kind(group, kind)
        if spec is not None:
            keys.add(f"{user}|{owner_group}/{owner_kind}|{spec.plural}/{spec.group}")
    return sorted(keys)


ControllerEdge = tuple[str, GroupKind, GroupKind]  # (username, owner, created)


def blast_radius_conditions(controller_users: Iterable[str],
                            controller_creates: Iterable[ControllerEdge] = ()) -> list[dict[str, str]]:
    """Conditions that keep requests gpuguard would not judge anyway away from it (and from its outages).

    - UPDATEs by trusted controllers (the job controller and garbage collector removing finalizers,
      the Deployment controller's revision annotation): gpuguard never mutates them and never
      refuses a controller carrying out what it judged in the parent; with gpuguard down they
      would hold deleted Jobs' pods and whole namespaces in Terminating.
    - CREATEs by a trusted controller of an object whose controlling owner is a kind it creates that
      kind for (``controller_creates``: the ReplicaSet controller's Pods of a ReplicaSet), which
      gpuguard leaves alone while ``trustControllerPods`` is on: the same two facts the engine
      decides it by (``gpuguard.workloads.controllers``), identity and owner kind.  Edges whose
      objects are still judged (``mutate``: a Trainer's JobSet) are not in it.
    - UPDATEs that change neither spec nor labels, annotations or owners (finalizers,
      resourceVersion bookkeeping): nothing any policy reads changed.

    Subresource requests (``scale``, also the HPA's) always pass: their object is a Scale.
    """
    users = sorted(set(controller_users))
    same = " && ".join(f"object{f} == oldObject{f}" for f in (
        ".?spec.orValue(null)", ".metadata.?labels.orValue({})", ".metadata.?annotations.orValue({})",
        ".metadata.?ownerReferences.orValue([])"))
    out = [{"name": METADATA_ONLY_UPDATES,
            "expression": f"request.operation != 'UPDATE' || {_SUBRESOURCE} || oldObject == null || !({same})"}]
    if not users:
        return out
    keys = _create_keys(controller_creates)
    if keys:
        owned = (f"[{_RESOURCE}].exists(rk, object.metadata.?ownerReferences.orValue([]).exists(r, "
                 f"r.?controller.orValue(false) && (request.userInfo.username + '|' + {_OWNER_GROUP} + '/' + "
                 f"r.?kind.orValue('') + '|' + rk) in {_list(keys)}))")
        controller = f"(request.operation == 'CREATE' && !{owned})"
    else:
        controller = "request.operation != 'UPDATE'"
    out.insert(0, {"name": CONTROLLER_REQUESTS,
                   "expression": f"{_SUBRESOURCE} || !(request.userInfo.username in {_list(users)}) || {controller}"})
    return out


def merge(conditions: list[dict[str, str]]) -> list[dict[str, str]]:
    """The conditions as one, joined by ``&&`` in the order given.

    The apiserver evaluates every condition of a webhook before it looks for a false one, but CEL's
    ``&&`` stops at the first false operand: one condition whose cheap parts come first (a
    controller's request, a metadata-only update) skips the accelerator walk for most requests
    that never reach gpuguard, and costs one evaluation instead of three.
    """
    if len(conditions) <= 1:
        return [dict(c) for c in conditions]
    return [{"name": MERGED_NAME, "expression": " && ".join(f"({c['expression']})" for c in conditions)}]
