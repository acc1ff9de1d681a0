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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuguard.policies.base import CpuScope
from gpuguard.workloads.accelerators import NOT_ACCELERATORS
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
        scope = policy_set.cpu_scope
        if scope.everything:
            return scope
        classes.update(scope.priority_classes)
    return CpuScope(priority_classes=frozenset(classes))


# ---------------------------------------------------------------- CEL

def _lit(text: str) -> str:
    """A CEL string literal (single-quoted; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _glob_regex(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")


def _glob_terms(patterns: Iterable[str], var: str) -> list[str]:
    """CEL: ``var`` matches one of ``patterns`` (globs), as string tests where the glob allows (exact names one
    ``in``, ``*x*`` a ``contains``, ``*x`` an ``endsWith``, ``x*`` a ``startsWith``), the rest one regex: a regex
    costs the apiserver for its size on every evaluation of the condition (``bench/matchconditions.py``)."""
    exact: list[str] = []
    terms: list[str] = []
    others: list[str] = []
    for pattern in patterns:
        lead, trail, core = pattern.startswith("*"), pattern.endswith("*"), pattern.strip("*")
        if not core or any(c in core for c in "*?["):
            others.append(pattern)
        elif lead and trail:
            terms.append(f"{var}.contains({_lit(core)})")
        elif lead:
            terms.append(f"{var}.endsWith({_lit(core)})")
        elif trail:
            terms.append(f"{var}.startsWith({_lit(core)})")
        else:
            exact.append(core)
    if exact:
        terms.insert(0, f"{var} in {_list(exact)}")
    if others:
        terms.append(f"{var}.matches({_lit('^(' + '|'.join(_glob_regex(p) for p in others) + ')$')})")
    return terms


def accelerator_test(patterns: Iterable[str], var: str) -> str:
    """CEL: resource name ``var`` matches one of the accelerator globs, each as the cheapest test that matches it
    (``_glob_terms``): the apiserver evaluates this for every container limit of every object the rules send it,
    and a regex is the most expensive of them."""
    return " || ".join(_glob_terms(patterns, var)) or "false"


def may_be_accelerator_test(not_accelerators: Sequence[str], var: str) -> str:
    """CEL: extended resource name ``var`` (it has a ``/``) may be an accelerator by its structure
    (``accelerators.may_be_accelerator``): a vendor-domain name (``vendor.example/device``) outside Kubernetes'
    own domains and not on the list of what is never one.  What the cluster's nodes or DeviceClasses add (a
    vendor's NPU no profile names) reaches the webhook without rendering it again; what is not one only costs a
    review.  The list is matched as written (the Python rule ignores case): a name in other case is let through."""
    never = [*(f"{var}.{test}" for test in ("startsWith('kubernetes.io/')", "startsWith('k8s.io/')",
                                            "contains('.kubernetes.io/')", "contains('.k8s.io/')")),
             *_glob_terms(not_accelerators, var)]
    return f"{var}.matches({_lit('^[^/]*[.][^/]*/.+$')}) && !({' || '.join(never)})"


def limit_test(patterns: Iterable[str], open_world: Sequence[str] | None, var: str) -> str:
    """CEL: limit name ``var`` is an accelerator's (the profiles' names) or, with ``open_world`` (what is never
    one), may be one.  Only an extended resource has a ``/``: ``cpu``, ``memory`` and ``hugepages-*`` fail that
    first, cheapest test and skip the rest (the regexes run only on vendor names the profiles' did not match)."""
    test = accelerator_test(patterns, var)
    if open_world is not None:
        test = f"{test} || ({may_be_accelerator_test(open_world, var)})"
    return f"{var}.contains('/') && ({test})"


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


def spec_test(patterns: Iterable[str], classes: list[str], open_world: Sequence[str] | None = None) -> str:
    """CEL on pod spec ``s``: DRA resource claims, or a container or init container whose limits name an
    accelerator (limits alone are enough: Kubernetes refuses an extended resource requested without
    a limit, accelerators can't be overcommitted) or, with ``open_world`` (what is never an accelerator), may be
    one by structure; or a priority class a policy reserves."""
    terms = ["s.?resourceClaims.orValue([]).size() > 0",
             "(s.?containers.orValue([]) + s.?initContainers.orValue([])).exists(c, "
             f"c.?resources.?limits.orValue({{}}).exists(r, {limit_test(patterns, open_world, 'r')}))"]
    if classes:
        terms.append(f"s.?priorityClassName.orValue('') in {_list(classes)}")
    return " || ".join(terms)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_lit(v) for v in values) + "]"


CONDITION_NAME = "accelerator-objects"


def _request_key(kinds: Sequence[KindSpec]) -> tuple[str, Any]:
    """CEL for the requested resource, and the key each kind has in it.

    Within one API group (each webhook's rules are one group) the plural alone tells the kinds
    apart; across groups it is ``plural/group`` (the core group's ``""`` is left out of what the
    apiserver evaluates, hence the ``has``).
    """
    if len({k.group for k in kinds}) == 1:
        return "request.resource.resource", lambda spec: spec.plural
    return ("(request.resource.resource + '/' + (has(request.resource.group) ? request.resource.group : ''))",
            lambda spec: f"{spec.plural}/{spec.group}")


def build_match_conditions(patterns: Iterable[str], scope: CpuScope = _ACCELERATORS_ONLY,
                           kinds: Iterable[KindSpec] = KINDS,
                           open_world: Sequence[str] | None = None) -> list[dict[str, str]]:
    """The accelerator condition for a webhook whose rules cover ``kinds``; ``[]`` (send everything) when a
    policy needs every object or no kind says where its pod specs are.

    The apiserver's cost of a condition grows with the number of nodes in the expression, evaluated
    or not (``bench/mcbench``: an unevaluated ``false && ...`` of 200 comparisons costs 40x a bare
    ``false``), so the expression is as small as the kinds allow: a webhook of one kind tests its pod
    specs directly; several kinds gather the requested kind's pod specs into one list by a ``?:``
    chain on the resource, and one test is written once and applied to each.
    """
    kinds = tuple(kinds)
    if scope.everything:
        return []
    patterns = tuple(patterns)
    request, key = _request_key(kinds)
    grouped: dict[tuple[PathPattern, ...], list[str]] = {}
    object_paths: set[tuple[str, ...]] = set()
    always_sent = False
    for spec in kinds:
        if not spec.pod_spec_paths:
            always_sent = True  # not in the chain: always sent (see module docstring)
            continue
        keys = grouped.setdefault(spec.pod_spec_paths, [])
        if key(spec) not in keys:
            keys.append(key(spec))
        # Object-level fields where priority-abuse finds a priority class (Kubeflow runPolicy, Volcano spec).
        object_paths.update(tuple(str(step) for step in path) for path in spec.priority_class_paths)
    if not grouped:
        return []
    classes = sorted(scope.priority_classes)
    single = len(grouped) == 1 and not always_sent
    if single:
        ((paths, _),) = grouped.items()
        chain = " + ".join(pod_specs("o", path) for path in paths)
    else:
        chain = "[]"
        for paths, keys in reversed(grouped.items()):
            specs = " + ".join(pod_specs("o", path) for path in paths)
            chain = f"(rk in {_list(keys)}) ? {specs} : {chain}"
    per_object = [f"({chain}).exists(s, s != null && ({spec_test(patterns, classes, open_world)}))"]
    if classes:
        per_object += [f"{_optional('o', path, chr(39) * 2)} in {_list(classes)}" for path in sorted(object_paths)]
    objects = f"[object, oldObject].exists(o, o != null && ({' || '.join(per_object)}))"
    if single:
        expression = objects
    else:
        every = _list(k for keys in grouped.values() for k in keys)
        # rk is bound once by a one-element list's exists() (the apiserver's CEL has no cel.bind).
        expression = f"[{request}].exists(rk, !(rk in {every}) || {objects})"
    return [{"name": CONDITION_NAME, "expression": expression}]


# ---------------------------------------------------------------- blast radius

CONTROLLER_REQUESTS = "not-controller-requests"
METADATA_ONLY_UPDATES = "not-finalizer-only-updates"
MERGED_NAME = "judged-requests"
ControllerEdge = tuple[str, GroupKind, GroupKind]  # (username, owner, created)


def _create_keys(creates: Iterable[ControllerEdge], kinds: Sequence[KindSpec]) -> tuple[list[str], bool]:
    """``user|ownerApiVersion|OwnerKind[|resource]`` for each edge whose created kind is in ``kinds``, and
    whether the resource is part of the key (only when ``kinds`` has more than one).

    The owner is keyed by each apiVersion its kind serves, so CEL compares ``r.apiVersion`` as it is
    (cheaper than cutting the group out of it); an owner kind outside the kind table is left out,
    and its objects reach gpuguard as any user's would.
    """
    _, key = _request_key(kinds)
    by_group_kind = {spec.api_group_kind: spec for spec in kinds}
    with_resource = len(kinds) > 1
    keys = set()
    for user, owner, child in creates:
        spec = by_group_kind.get(child)
        owner_spec = lookup_group_kind(*owner)
        if spec is None or owner_spec is None:
            continue
        for version in owner_spec.versions:
            api_version = f"{owner[0]}/{version}" if owner[0] else version
            keys.add(f"{user}|{api_version}|{owner[1]}" + (f"|{key(spec)}" if with_resource else ""))
    return sorted(keys), with_resource


def blast_radius_conditions(controller_users: Iterable[str], controller_creates: Iterable[ControllerEdge] = (),
                            kinds: Sequence[KindSpec] = KINDS) -> list[dict[str, str]]:
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

    The object webhooks' rules name no subresources (``scale`` has a webhook of its own without
    conditions), so these never see a Scale.
    """
    kinds = tuple(kinds)
    users = sorted(set(controller_users))
    same = " && ".join(f"object{f} == oldObject{f}" for f in (
        ".?spec.orValue(null)", ".metadata.?labels.orValue({})", ".metadata.?annotations.orValue({})",
        ".metadata.?ownerReferences.orValue([])"))
    out = [{"name": METADATA_ONLY_UPDATES,
            "expression": f"request.operation != 'UPDATE' || oldObject == null || !({same})"}]
    if not users:
        return out
    keys, with_resource = _create_keys(controller_creates, kinds)
    if keys:
        request, _ = _request_key(kinds)
        resource = f" + '|' + {request}" if with_resource else ""
        owned = (f"object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false) && "
                 f"(request.userInfo.username + '|' + r.apiVersion + '|' + r.kind{resource}) in {_list(keys)})")
        controller = f"(request.operation == 'CREATE' && !{owned})"
    else:
        controller = "request.operation != 'UPDATE'"
    out.insert(0, {"name": CONTROLLER_REQUESTS,
                   "expression": f"!(request.userInfo.username in {_list(users)}) || {controller}"})
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


# ---------------------------------------------------------------- per webhook

@dataclass(frozen=True)
class Filters:
    """What the webhooks' matchConditions are made of, from the config the server runs.

    Each webhook gets the conditions of its own kinds only (``conditions_for``): the apiserver's
    time to evaluate a condition grows with the expression's size, branches not taken included
    (``bench/mcbench``), so a Pod's create must not pay for the paths of twenty CRDs.
    """

    patterns: tuple[str, ...]
    scope: CpuScope = _ACCELERATORS_ONLY
    controller_users: tuple[str, ...] = ()
    controller_creates: tuple[ControllerEdge, ...] = ()
    # What is never an accelerator, when resources the cluster may add are let through by structure (the config
    # learns accelerators from nodes); ``None``: the profiles' names only.
    open_world: tuple[str, ...] | None = None

    def conditions_for(self, kinds: Sequence[KindSpec]) -> list[dict[str, str]]:
        """One merged condition for a webhook whose rules cover exactly ``kinds``."""
        kinds = tuple(kinds)
        mine = {k.api_group_kind for k in kinds}
        creates = [edge for edge in self.controller_creates if edge[2] in mine]
        accelerators = build_match_conditions(self.patterns, self.scope, kinds, self.open_world)
        return merge([*blast_radius_conditions(self.controller_users, creates, kinds), *accelerators])


def filters_from(config: Any) -> Filters:
    """The filters for a compiled config: its accelerator resources, its policies' CPU needs, its
    trusted controllers (their creates only while ``trustControllerPods`` is on)."""
    controllers = config.controllers
    inventory = config.inventory
    open_world = (NOT_ACCELERATORS + tuple(inventory.not_accelerators)) if inventory.learn_accelerators else None
    return Filters(patterns=tuple(config.accelerators.resource_patterns()), scope=cpu_scope(config),
                   controller_users=tuple(sorted(controllers.users())),
                   controller_creates=tuple(controllers.left_alone()) if config.trust_controller_pods else (),
                   open_world=open_world)
