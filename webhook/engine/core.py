"""The engine: one pure function from (object, request context, config) to a Decision.

The webhook's /mutate and /validate, ``gpuguard evaluate`` and ``gpuguard audit`` all call
``Engine.evaluate``; no shell re-implements a policy.  Steps:

1. copy the object once (an orjson round trip: ~10x faster than ``copy.deepcopy``, and it
   normalises YAML-only types such as dates, so before and after compare as JSON);
2. skip unknown kinds and exempt requests; refuse resource quantities no policy could read
   (``gpuguard.webhook.engine.prechecks``); leave alone what a trusted controller made from a
   template gpuguard already checked (``gpuguard.workloads.controllers``: decided by the requester's
   identity and the owner kind together, never by content alone); what a controller derives from
   a template held elsewhere (a TrainJob's JobSet, built from its runtime) is judged in full;
3. run the mutating policies on the copy (CREATE and UPDATE; on UPDATE immutable fields keep the
   stored value, ``gpuguard.webhook.engine.update``), then the validating policies on the mutated copy, as the
   apiserver runs validating webhooks after mutating ones (on UPDATE only findings the stored
   object did not have can deny);
4. diff before and after once into a JSON patch; the values the object set that a policy changed
   (recorded by the policy as it wrote them, ``WorkloadView.changes``) become ``Decision.changes``,
   each named by the policy that was running: the webhook warns with them.

Malformed objects never raise out of here: a policy that trips over one produces a
Decision with ``error`` set, and the config's ``failureMode`` decides whether it is allowed.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gpuguard.policies.base import Finding, MutatingPolicy, PolicySettings
from gpuguard.webhook.config import Config, PolicySet, with_learned_accelerators
from gpuguard.webhook.custom import evaluate as custom_rules
from gpuguard.webhook.decision import ACTION_TO_VERDICT, Change, Decision, RequestContext, Violation
from gpuguard.webhook.engine import prechecks
from gpuguard.webhook.engine.patch import make_patch
from gpuguard.webhook.engine.update import keep_immutable, subject
from gpuguard.workloads import kinds
from gpuguard.workloads.claims import ClaimSource
from gpuguard.workloads.controllers import ControllerOrigin
from gpuguard.workloads.inventory import EMPTY_INVENTORY, Inventory
from gpuguard.workloads.kinds.configured import structural_kind
from gpuguard.workloads.kinds.knative import features as knative
from gpuguard.workloads.kinds.spec import Resolved
from gpuguard.workloads.lifecycle import ClassReading, read_class
from gpuguard.workloads.paths import Replaced, dotted, get_path
from gpuguard.workloads.structural import find_pod_specs
from gpuguard.workloads.view import (
    WORKLOAD_CLASS_LABEL,
    WORKLOAD_CLASSES,
    WorkloadView,
    build_view,
)

log = logging.getLogger("gpuguard.engine")

MUTATED_BY_ANNOTATION = "gpuguard.io/mutated-by"
MUTATING_OPERATIONS = ("CREATE", "UPDATE")
# Subjects of findings about the workload as a whole (its accelerator total): compared by size on UPDATE.
WORKLOAD_SUBJECTS = frozenset({"spec", ""})


def _copy(raw: bytes) -> Any:
    return orjson.loads(raw)


def _spec_unchanged(ctx: RequestContext, obj: dict) -> bool:
    """An UPDATE that changes only metadata (labels, annotations, owners): its spec is as stored."""
    old = ctx.old_object
    if ctx.operation != "UPDATE" or not isinstance(old, dict):
        return False
    return all(obj.get(k) == old.get(k) for k in {*obj, *old} - {"metadata", "status"})


def _not_in_shape(kind: str, policies: list[str]) -> Violation:
    """Why a metadata-only UPDATE was left as it is, and how to bring the workload into shape.

    Mutating it would rewrite its pod template and so roll out every pod behind a `kubectl label`
    (cost-allocation labellers, GitOps adoption); gpuguard says so instead.
    """
    # kubectl shows about 256 characters of a warning: what to do first, the policy list last.
    return Violation(policies[0], "warn", "spec",
                     f"this {kind or 'object'} is not in gpuguard's shape; left as is on a metadata-only update "
                     "(no rollout)",
                     f"run `gpuguard fix` on its manifest (or change its spec by hand); it applies "
                     f"{', '.join(policies)}",
                     subject="spec")


def _unreadable(group: str, kind: str, namespace: str | None, name: str) -> None:
    """The reader where nothing can be looked up."""
    return None


def _kept(change: Replaced, work: dict) -> bool:
    """Whether a recorded change is in the object the engine answers with (UPDATE may lay a stored
    immutable field back over it, Knative take back what it would refuse)."""
    now = get_path(work, change.path)
    if change.how == "removed":
        return now is None
    if change.how == "extended":
        return isinstance(now, list) and len(now) >= change.new
    return bool(now == change.new)


def _changes(recorded: list[Replaced], owners: list[str], work: dict, kind: str) -> list[Change]:
    """What the policies recorded of the user's values, named by policy and by a path users read
    (list items by name), as far as it is still in the answer."""
    return [Change(policy, subject(work, r.path), r.how, r.old, r.new, kind)
            for r, policy in zip(recorded, owners, strict=True) if _kept(r, work)]


def _meta(obj: dict) -> dict:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class _Read:
    """What the read phase hands the policies: the object's JSON bytes (``None`` when nothing is mutated), the
    object as received, the working copy policies change (the object itself when nothing is mutated) and its pod
    templates (``prechecks.located``: found once, before any policy changes the copy)."""

    raw: bytes | None
    original: dict
    work: dict
    refs: list[kinds.TemplateRef]



# The view's class until the engine reads it: only after the view shows that some policy will judge the object.
UNREAD_CLASS = ""


def judged_by_any_policy(view: WorkloadView, policy_set: PolicySet) -> bool:
    """Whether an enabled policy may act on the object at all: every policy on an object with accelerators (or
    with DRA claims, whose devices may be accelerators); on one without, only what the policies' own
    ``cpu_scope`` says (``PolicySet.cpu_scope``) and the admin's CEL rules, which may match anything.  Skipping the
    others changes nothing: a policy whose scope leaves CPU objects out changes and reports nothing on them."""
    if view.total_gpus or policy_set.custom:
        return True
    if any(t.spec.get("resourceClaims") or t.unresolved_claims for t in view.templates):
        return True
    scope = policy_set.cpu_scope
    if scope.everything:
        return True
    if not scope.priority_classes:
        return False
    used = {t.spec.get("priorityClassName") for t in view.templates}
    used.update(name for _, name in view.kind_priority_classes())
    return not scope.priority_classes.isdisjoint(used)


class Engine:
    """Evaluates objects against one compiled config.  Stateless per request; safe to share."""

    def __init__(self, config: Config, claims: ClaimSource | None = None, nodes: Inventory | None = None):
        self.config = config
        kinds.configure(config.kinds)  # the config's own kinds join the table the shells list and intercept
        self._own_kinds = {k.api_group_kind: k for k in config.kinds}  # and this engine judges them, whatever else
        # DRA claims: the audit's own source, else the server's shared watch (``gpuguard.workloads.claims``)
        self.claims = claims
        self.inventory = EMPTY_INVENTORY
        self.set_nodes(nodes if nodes is not None else EMPTY_INVENTORY)

    def set_nodes(self, nodes: Inventory) -> None:
        """The cluster's node groups (the server's watch, ``--nodes``), joined once with the config's pools.

        Called when nodes change, never per review: a review reads the summarised groups only.  The accelerators
        the nodes and DeviceClasses advertise beyond the profiles are learned here too (``config.accelerators``
        of a copy of the config: ``gpuguard.webhook.config.with_learned_accelerators``).
        """
        self.inventory = nodes.with_groups(self.config.node_pools)
        self.config = with_learned_accelerators(self.config, self.inventory)

    # ------------------------------------------------------------------ classification
    def classify(self, obj: dict, kind: kinds.KindSpec, origin: ControllerOrigin | None = None,
                 policy_set: PolicySet | None = None) -> str:
        """The workload class it is judged as (:meth:`read_class`)."""
        return self.read_class(obj, kind, origin, policy_set).judged

    def read_class(self, obj: dict, kind: kinds.KindSpec, origin: ControllerOrigin | None = None,
                   policy_set: PolicySet | None = None, refs: list[kinds.TemplateRef] | None = None) -> ClassReading:
        """What the workload is (``gpuguard.workloads.lifecycle``): its kind's purpose first, then the user's
        declaration where the admin allows the class label and a price bounds what it lowers; what its work
        looks like is only a guess.  What a trusted controller made is its owner's kind of work; an
        ownerReference or a label written by a user never grants anything."""
        granted = self.granted_classes(policy_set)
        if origin is not None:
            owner = kinds.lookup_group_kind(*origin.owner)
            if owner is not None and owner.kind != "Pod":
                return read_class(obj, kind, self.kind_class(owner), None, granted, lifecycle_kind=owner, refs=refs)
        declared = None
        if self.config.workload_classes.allow_label_override:
            labels = _meta(obj).get("labels")
            value = labels.get(WORKLOAD_CLASS_LABEL) if isinstance(labels, dict) else None
            declared = value if value in WORKLOAD_CLASSES else None
        return read_class(obj, kind, self.kind_class(kind), declared, granted, refs=refs)

    def granted_classes(self, policy_set: PolicySet | None) -> frozenset[str] | None:
        """The privileged classes a namespace grants (workload-class ``allowEscalationTo``); ``None``: all.

        With the workload-class policy off the admin has chosen not to police classes: every
        class is granted, as the kind or label asks.
        """
        settings = (policy_set or self.config.policies).settings("workload-class")
        if settings is None:
            return None
        return frozenset(getattr(settings, "allow_escalation_to", ()))

    def kind_class(self, kind: kinds.KindSpec) -> str:
        """The class a kind gets when nobody declares one: the admin's byKind, else the kind table's."""
        return self.config.workload_classes.by_kind.get(kind.kind, kind.default_class)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, obj: Any, ctx: RequestContext | None = None, *, plain_json: bool = False) -> Decision:
        """The decision for one object.  Never raises for bad input.

        ``plain_json``: the caller vouches that ``obj`` came straight from a JSON parser (the
        webhook's request body) and will not be modified, so it serves as the "before" side of
        the diff as it is and only the working copy is made: on a 60 KB pod that halves the
        copying.  Objects from YAML (dates, non-string keys) must leave it False.
        """
        ctx = ctx or RequestContext()
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        decision = Decision(
            allowed=True,
            api_version=str(obj.get("apiVersion", "")) if isinstance(obj, dict) else "",
            kind=str(obj.get("kind", "")) if isinstance(obj, dict) else "",
            # request.namespace (the webhook) is what the apiserver stores the object under; the
            # object's own field is all the audit has.
            namespace=ctx.namespace or (meta.get("namespace") if isinstance(meta.get("namespace"), str) else None),
            name=meta.get("name") if isinstance(meta.get("name"), str) else meta.get("generateName"),
            original=obj,
            mutated=obj,
        )
        if not isinstance(obj, dict):
            return self._fail(decision, "the object is not a JSON/YAML mapping", ctx)
        try:
            return self._decide(decision, obj, ctx, plain_json)
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            return self._fail(decision, f"the object could not be read: {exc}", ctx)
        except Exception as exc:  # a policy bug or a bound (RecursionError) must not take the webhook down
            log.error("policy evaluation failed for %s %s/%s: %s", decision.kind, decision.namespace,
                      decision.name, type(exc).__name__)
            log.debug("policy evaluation traceback", exc_info=True)
            return self._fail(decision, f"its policies could not be evaluated ({type(exc).__name__}); if it is "
                              "unusually large or deeply nested, split or simplify it, else tell the cluster admin",
                              ctx)

    def _decide(self, decision: Decision, obj: dict, ctx: RequestContext, plain_json: bool,
                merge_runtime: bool = True) -> Decision:
        kind = kinds.lookup(obj.get("apiVersion"), obj.get("kind")) or \
            self._own_kinds.get((kinds.group_of(obj.get("apiVersion")), str(obj.get("kind"))))
        if kind is None:
            return self._unknown_kind(decision, obj, ctx)
        exempt = self.config.exemption(decision.namespace, ctx.username, ctx.groups)
        if exempt:
            decision.skipped = exempt
            return decision
        refs = prechecks.located(obj, kind)  # bounded; the class reading and the view use them too
        if reason := prechecks.too_large(obj, kind, refs):  # before any walk that grows with the object
            return self._fail(decision, reason, ctx)
        invalid = prechecks.new_findings(obj, ctx.old_object if ctx.operation == "UPDATE" else None)
        if invalid:
            return self._refuse_invalid(decision, invalid)
        if kind.runtime is not None:
            return self._evaluate_through_runtime(decision, kind, obj, ctx)
        origin = self.config.controllers.origin(obj, ctx.username) if ctx.username else None
        if origin is not None:
            decision.workload_class = self.classify(
                obj, kind, origin, self.config.policies_for(decision.namespace, ctx.namespace_labels)[1])
            # Derived from a template held outside its parent (a TrainJob's JobSet, built from the
            # runtime): the first object holding the pod templates its pods will run, so it is mutated
            # and judged in full.  The parent was judged against the runtime as it was then; a runtime
            # created or changed since (or still in a lookup cache) can't slip through.
            if not origin.mutate and (self.config.trust_controller_pods or not ctx.validate):
                decision.skipped = origin.reason
                return decision
        if origin is None and kind.merged_runtime is not None and ctx.validate and merge_runtime:
            resolved = kind.merged_runtime.resolve(obj, decision.namespace, ctx.read_object or _unreadable,
                                                   ctx.list_objects)
            if resolved is not None:
                return self._evaluate_with_runtime(decision, kind, obj, ctx, plain_json, resolved)
        # What a controller made is never mutated (it must equal its parent's template) unless its
        # edge says the controller compares nothing gpuguard adds.  Nor is what a controller updates
        # (the Deployment controller's revision annotation on a Deployment): a config change must
        # not roll out every Deployment behind its owner's back.
        mutating = ctx.mutate and ctx.operation in MUTATING_OPERATIONS and (
            origin.mutate if origin is not None else not (
                ctx.operation == "UPDATE" and self.config.controllers.is_controller(ctx.username)))
        if plain_json and not mutating:
            # Validation only reads: the caller's plain-JSON object is both sides, no copy at all.
            return self._evaluate(decision, kind, ctx, _Read(None, obj, obj, refs), mutating, origin)
        raw = orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
        original = obj if plain_json else _copy(raw)
        # The copy has the object's structure, so the templates located in it are the copy's too.
        return self._evaluate(decision, kind, ctx, _Read(raw, original, _copy(raw), refs), mutating, origin)

    def _unknown_kind(self, decision: Decision, obj: dict, ctx: RequestContext) -> Decision:
        """A kind no family describes: found by structure (``gpuguard.workloads.structural``).  With no accelerators
        in its pod specs it is not gpuguard's to judge; with some it can't be judged (its counts, lifecycle and gang
        semantics are unknown), so it is reported, never passed in silence — an admin adds it by configuration."""
        skipped = f"kind {decision.kind or '<none>'} ({decision.api_version or '<none>'}) is not a workload gpuguard " \
                  "checks"
        group = kinds.group_of(obj.get("apiVersion"))
        if (group, decision.kind) in kinds.TEMPLATE_HOLDERS or \
                self.config.exemption(decision.namespace, ctx.username, ctx.groups):
            decision.skipped = skipped
            return decision
        probe = build_view(obj, structural_kind(group, decision.kind),
                           self.config.accelerators, "training", namespace=decision.namespace, claims=self.claims)
        probe.inventory = self.inventory
        gpus = probe.total_gpus
        if not gpus:
            decision.skipped = skipped
            return decision
        decision.gpus, decision.gpus_by_resource = gpus, probe.gpus_by_resource()
        where = ", ".join(dotted(t.spec_path) for t in probe.gpu_templates[:3])
        gpu_paths = {t.spec_path for t in probe.gpu_templates}
        uncounted = [dotted(f.spec_path) for f in find_pod_specs(obj) if not f.counted and f.spec_path in gpu_paths]
        counted = f" (at least: no replica count was found beside {', '.join(uncounted[:2])})" if uncounted else ""
        noun = "accelerator" if gpus == 1 else "accelerators"
        what = f"unknown kind {decision.kind} ({decision.api_version}) with {gpus} {noun}{counted} in {where}"
        return self._fail(decision, f"{what}: gpuguard can't tell what it is for or how many pods it makes; add it to "
                          "the config's kinds: (docs/admin.md#adding-a-kind)", ctx, unresolved=what)

    def _evaluate_through_runtime(self, decision: Decision, kind: kinds.KindSpec, obj: dict,
                                  ctx: RequestContext) -> Decision:
        """A kind that names its pod templates elsewhere (a TrainJob and its runtime): judge what they make.

        The object is not mutated (its templates are not in it; the JobSet its controller creates from
        them is, see ``gpuguard.workloads.controllers``).  Validation resolves the runtime through ``ctx.read_object``,
        builds the object the operator will create, runs every policy on it as on any workload, and
        reports the findings on the named object, prefixed with where in the runtime they are.
        """
        assert kind.runtime is not None
        if not ctx.validate:
            decision.skipped = (f"{kind.kind}: judged by validation with its runtime; the JobSet its controller "
                                "creates is mutated")
            return decision
        key = kinds.runtime_of(obj, kind.runtime, decision.namespace)
        runtime = ctx.read_object(*key) if ctx.read_object and key else None
        if runtime is None:
            where = "it names no runtime" if key is None else f"{key[1]} {key[3]!r} not found"
            then = "name an existing runtime" if key is None else f"create the {key[1]} first, then the {kind.kind}"
            return self._fail(decision, f"its runtime could not be read ({where}), so its pods could not be "
                              f"checked; {then}", ctx, unresolved=where)
        made = kind.runtime.expand(obj, runtime)
        inner = self.evaluate(made, replace(ctx, operation="CREATE", old_object=None, mutate=True, validate=True))
        assert key is not None
        return self._judged_as(decision, inner, f"runtime {key[1]} {key[3]}: ", ctx)

    def _evaluate_with_runtime(self, decision: Decision, kind: kinds.KindSpec, obj: dict, ctx: RequestContext,
                               plain_json: bool, resolved: Resolved) -> Decision:
        """A kind whose operator merges a runtime into its pods (a KServe InferenceService and the ServingRuntime
        KServe chooses): mutated by its own fields as any object, validated as the pods the operator makes.

        Validation runs every policy on ``merge(mutated object, runtime)`` (the runtime's container with the
        object's fields over it) and reports the findings prefixed with the runtime's kind and name; what it
        counts (GPUs, replicas) is the merged pods'.  A runtime that can't be resolved (one KServe installs
        itself, audited offline) lowers confidence, not the judgement: where the object's own fields give its
        accelerators it is judged on them, with a warning; only where they don't can it not be judged.
        """
        assert kind.merged_runtime is not None
        if resolved.runtime is None:
            unread = f"its serving runtime could not be resolved ({resolved.problem})"
            alone = self._decide(replace(decision), obj, ctx, plain_json, merge_runtime=False)
            if alone.error or alone.skipped:
                return alone
            if not alone.gpus:
                return self._fail(decision, f"{unread}, so its pods could not be checked; create the runtime "
                                  "first, or name an existing one", ctx, unresolved=resolved.problem)
            decision = alone
            decision.violations.append(Violation(
                "gpu-request-shape", "warn", "spec", f"not fully checked: {unread}; judged on its own fields "
                f"({decision.gpus} accelerators), not on the runtime's containers",
                "create the runtime, or audit with the cluster's runtimes (--lookup-cluster)", subject="spec"))
            return decision
        self._decide(decision, obj, replace(ctx, validate=False), plain_json)
        if decision.error or decision.skipped:
            return decision
        merged = kind.merged_runtime.merge(decision.mutated, resolved.runtime)
        inner = self.evaluate(merged, replace(ctx, operation="CREATE", old_object=None, mutate=False, validate=True))
        return self._judged_as(decision, inner, f"with {resolved.kind} {resolved.name}: ", ctx)

    def _judged_as(self, decision: Decision, inner: Decision, prefix: str, ctx: RequestContext) -> Decision:
        """``decision`` takes the judgement of what its operator makes (``inner``): its findings, prefixed with
        where they are, after the object's own; its class and counts; on UPDATE only what is new."""
        if inner.error or inner.skipped:
            decision.error, decision.skipped, decision.allowed = inner.error, inner.skipped, inner.allowed
            decision.unresolved = inner.unresolved
            return decision
        decision.violations.extend(replace(v, path=prefix + v.path) for v in inner.violations)
        decision.workload_class, decision.gpus = inner.workload_class, inner.gpus
        decision.gpus_by_resource = inner.gpus_by_resource
        if ctx.operation == "UPDATE" and isinstance(ctx.old_object, dict) and decision.violations:
            decision.violations = self._new_in_update(decision.violations, ctx, decision.gpus)
        decision.allowed = not decision.denials
        return decision

    @staticmethod
    def _refuse_invalid(decision: Decision, found: list[prechecks.InvalidQuantity]) -> Decision:
        """Bad quantities are denied whatever the config says: no policy after this could judge the object."""
        decision.violations = [Violation(policy=prechecks.POLICY_ID, verdict="deny", path=f.where,
                                         message=f.problem, fix=prechecks.FIX, subject=f.where) for f in found]
        decision.allowed = False
        decision.invalid = True
        return decision

    def _fail(self, decision: Decision, reason: str, ctx: RequestContext, unresolved: str | None = None) -> Decision:
        """What can't be judged: refused, unless the admin chose ``failureMode: open``.

        A trusted controller's request is never refused for it: the controller only carries out
        what gpuguard judged in the parent, and refusing it would stall the parent's rollout.
        """
        decision.error, decision.unresolved = reason, unresolved
        decision.allowed = self.config.failure_mode == "open" or (
            bool(ctx.username) and self.config.controllers.is_controller(ctx.username))
        return decision

    def _evaluate(self, decision: Decision, kind: kinds.KindSpec, ctx: RequestContext, read: _Read,
                  mutating: bool, origin: ControllerOrigin | None) -> Decision:
        """Judge what the read phase found (:class:`_Read`): the mutating, then the validating policies."""
        raw, original, work, refs = read.raw, read.original, read.work, read.refs
        decision.original = original
        _, policy_set = self.config.policies_for(decision.namespace, ctx.namespace_labels)
        # The class is read from the object as the caller gave it (``original``: the view copies inherited
        # pod fields into ``work``), and only once the view shows a policy will read it.
        view = build_view(work, kind, self.config.accelerators, UNREAD_CLASS, None, decision.namespace,
                          self.claims, refs)
        view.inventory = self.inventory
        view.read_object = ctx.read_object  # a claim's access modes (the webhook: cached, read before the review)
        view.list_objects = ctx.list_objects  # the namespace's ResourceQuotas (the webhook: cached, listed before)
        decision.gpus = view.total_gpus
        decision.gpus_by_resource = view.gpus_by_resource()
        unjudged = [(path, text) for t in view.templates for path, text in t.unjudged_claims]
        # What the input lacks lowers confidence but never flips what the object's own fields support: a
        # workload whose accelerators its containers already give is judged on them (the claim stays a
        # warning); only one whose accelerator count is itself unknown can't be judged.
        if unjudged and origin is None and self.config.failure_mode == "closed" and not view.total_gpus \
                and not self.config.controllers.is_controller(ctx.username):
            path, text = unjudged[0]
            where = dotted(path)
            # A DRA claim names another object; a serving kind's own fields (a KubeAI profile) say their fix.
            then = "; create the claim (template) first, or check its name and namespace" \
                if "resourceClaims" in where else ""
            return self._fail(decision, f"{where}: {text}{then}", ctx, unresolved=f"{where}: {text}")
        if not judged_by_any_policy(view, policy_set):
            return self._unjudged(decision, view, ctx, lambda: self._class_of(original, kind, origin, policy_set, refs))
        reading = self.read_class(original, kind, origin, policy_set, refs)
        view.workload_class = workload_class = reading.judged
        view.reading = reading
        decision.workload_class = workload_class

        owners: list[str] = []  # the policy that recorded each of view.changes
        if mutating:
            assert raw is not None
            owners = self._mutate(decision, view, policy_set, kind, raw, ctx, workload_class)
            old = ctx.old_object
            if decision.mutated_by and ctx.operation == "UPDATE" and isinstance(old, dict) and kind.immutable:
                keep_immutable(kind, work, original, old, lambda: self._mutated_copy(old, kind, ctx, policy_set))
                if work == original:
                    decision.mutated_by = []
            if decision.mutated_by:
                self._annotate(work, decision.mutated_by)
        decision.mutated = work

        if ctx.validate and ctx.operation in ("CREATE", "UPDATE"):
            decision.validated_from = len(decision.violations)
            decision.violations.extend(self._validate(view, policy_set))
            # Admins' CEL rules (webhook/custom/): they read the request too, so they get ctx.
            decision.violations.extend(custom_rules.evaluate(view, policy_set.custom, ctx, decision.namespace))
            if ctx.operation == "UPDATE" and isinstance(ctx.old_object, dict) and decision.violations:
                decision.violations = self._new_in_update(decision.violations, ctx, decision.gpus)

        view.settle()  # inherited pod fields no policy changed go back to being inherited
        if decision.mutated_by and _spec_unchanged(ctx, original):
            decision.violations.append(_not_in_shape(decision.kind, decision.mutated_by))
            decision.mutated_by = []
            decision.mutated = work = original
        # Policies report their changes (and warn-mode ones work on scratch copies), so an
        # unchanged object needs no diff: the common case for controller-created pods.
        decision.patch = make_patch(original, work) if decision.mutated_by else []
        if view.changes and decision.mutated_by:
            decision.changes = _changes(view.changes, owners, work, decision.kind)
        decision.allowed = not decision.denials
        return decision

    def _unjudged(self, decision: Decision, view: WorkloadView, ctx: RequestContext,
                  class_reader: Callable[[], str]) -> Decision:
        """An object no enabled policy acts on (a CPU object, ``judged_by_any_policy``): allowed unchanged, its
        class read only if a shell asks for it."""
        view.settle()  # the view's inherited pod fields leave the working copy again
        decision.mutated = view.obj
        decision.class_reader = class_reader
        if ctx.validate and ctx.operation in ("CREATE", "UPDATE"):
            decision.validated_from = 0
        return decision

    def _class_of(self, obj: dict, kind: kinds.KindSpec, origin: ControllerOrigin | None, policy_set: PolicySet,
                  refs: list[kinds.TemplateRef]) -> str:
        """The deferred class reading of an unjudged object; a reading that fails (it never has to decide
        anything there) falls back to what the kind is for."""
        try:
            return self.read_class(obj, kind, origin, policy_set, refs).judged
        except Exception:  # noqa: BLE001 - the class of an object nothing judged only labels it
            return self.kind_class(kind)

    # ------------------------------------------------------------------ mutation helpers
    def _mutate(self, decision: Decision, view: WorkloadView, policy_set: PolicySet, kind: kinds.KindSpec,
                raw: bytes, ctx: RequestContext, workload_class: str) -> list[str]:
        """Run the mutating policies in order on the view; returns the policy that recorded each of
        ``view.changes`` (they run one at a time, so what one records is its own: no per-policy copy or diff)."""
        owners: list[str] = []
        served = self._knative_templates(view)
        for policy, settings in policy_set.mutating:
            if settings.action == "enforce" and not served:  # nothing for Knative to take back
                if policy.run(view, settings):
                    decision.mutated_by.append(policy.id)
            elif settings.action == "enforce":
                before = [copy.deepcopy(t.spec) for t in served]
                if policy.run(view, settings):
                    taken_back = self._knative_take_back(policy.id, served, before)
                    decision.violations.extend(taken_back)
                    # A policy whose every change Knative would refuse changed nothing after all.
                    if not taken_back or any(t.spec != b for t, b in zip(served, before, strict=True)):
                        decision.mutated_by.append(policy.id)
            else:
                decision.violations.extend(self._would_mutate(policy, settings, kind, raw, ctx, workload_class))
            if len(view.changes) > len(owners):
                owners.extend([policy.id] * (len(view.changes) - len(owners)))
        return owners

    def _knative_templates(self, view: WorkloadView) -> list:
        """Templates Knative will serve, when some pod fields are gated (``kinds.knative.features``)."""
        if not self.config.knative_gated:
            return []
        return [t for t in view.templates
                if t.ref.knative is True or (t.ref.knative is None and self.config.knative_default)]

    def _knative_take_back(self, policy_id: str, served: list, before: list[dict]) -> list[Violation]:
        out = []
        for template, spec_before in zip(served, before, strict=True):
            snap = knative.snapshot(spec_before, self.config.knative_gated)
            restored = knative.take_back(template.spec, snap, self.config.knative_gated)
            if restored:
                text, fix = knative.message(template.spec_path, restored)
                out.append(Violation(policy_id, "warn", dotted(template.spec_path), text, fix,
                                     subject=dotted(template.spec_path)))
        return out

    def _mutated_copy(self, obj: dict, kind: kinds.KindSpec, ctx: RequestContext, policy_set: PolicySet) -> dict:
        """A copy of ``obj`` after the enforcing mutating policies: what gpuguard makes of it."""
        scratch = _copy(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
        view = build_view(scratch, kind, self.config.accelerators, self.classify(scratch, kind, None, policy_set),
                          namespace=ctx.namespace, claims=self.claims)
        view.inventory = self.inventory
        for policy, settings in policy_set.mutating:
            if settings.action == "enforce":
                policy.run(view, settings)
        view.settle()
        return scratch

    def _would_mutate(self, policy: MutatingPolicy, settings: PolicySettings, kind: kinds.KindSpec, raw: bytes,
                      ctx: RequestContext, workload_class: str) -> list[Violation]:
        """A mutating policy in warn/audit mode: run it on a scratch copy and report what it would change."""
        scratch, before = _copy(raw), _copy(raw)
        view = build_view(scratch, kind, self.config.accelerators, workload_class, namespace=ctx.namespace,
                          claims=self.claims)
        view.inventory = self.inventory
        policy.run(view, settings)
        view.settle()
        ops = make_patch(before, scratch)
        if not ops:
            return []
        paths = sorted({op["path"] for op in ops})
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        return [Violation(policy.id, ACTION_TO_VERDICT[settings.action], "metadata",
                          f"would change {shown}", f"apply the change yourself, or set {policy.id} to enforce",
                          subject="metadata")]

    @staticmethod
    def _annotate(work: dict, mutated_by: list[str]) -> None:
        meta = work.get("metadata")
        if meta is None:
            meta = work["metadata"] = {}
        if not isinstance(meta, dict):
            return
        annotations = meta.get("annotations")
        if annotations is None:
            annotations = meta["annotations"] = {}
        if not isinstance(annotations, dict):
            return
        previous = annotations.get(MUTATED_BY_ANNOTATION)
        ids = set(mutated_by)
        if isinstance(previous, str):
            ids.update(p for p in previous.split(",") if p)
        annotations[MUTATED_BY_ANNOTATION] = ",".join(sorted(ids))

    # ------------------------------------------------------------------ validation helpers
    def _validate(self, view: WorkloadView, policy_set: PolicySet) -> list[Violation]:
        out: list[Violation] = []
        for policy, settings in policy_set.validating:
            verdict = ACTION_TO_VERDICT[settings.action]
            finding: Finding
            for finding in policy.run(view, settings):
                out.append(Violation(policy.id, "warn" if finding.advisory and verdict == "deny" else verdict,
                                     dotted(finding.path), finding.message, finding.fix, finding.target,
                                     subject(view.obj, finding.path), finding.idle))
        return out

    def _new_in_update(self, violations: list[Violation], ctx: RequestContext, total: int) -> list[Violation]:
        """On UPDATE only what the update changes can be denied: drop findings the stored object had.

        Matched by policy and subject (the field path with item names for list indices), never by
        list position or message wording: see ``gpuguard.webhook.engine.update``.  Sizes are
        compared too: a finding about the workload as a whole (its accelerator total) is excused
        only while the update does not raise that total, so a workload already over its cap can
        shrink or change otherwise but never grow (``kubectl scale`` up, an HPA, a patch).
        """
        old_ctx = RequestContext(operation="CREATE", namespace=ctx.namespace,
                                 namespace_labels=ctx.namespace_labels, username=ctx.username, groups=ctx.groups,
                                 mutate=False, validate=True, read_object=ctx.read_object,
                                 list_objects=ctx.list_objects)
        old = self.evaluate(ctx.old_object, old_ctx)
        seen = {(v.policy, v.subject) for v in old.violations}
        grew = total > old.gpus
        return [v for v in violations
                if (v.policy, v.subject) not in seen or (grew and v.subject in WORKLOAD_SUBJECTS)]
