"""Run compiled custom rules on a workload view: the engine's one call into ``customPolicies``.

Per object, the variables every rule shares (``object``, ``request``, ``workload`` ...) go into
one CEL activation per pod template, which every rule of both scopes reuses: cel-expr-python
converts a Python value the first time an expression reads it and keeps the result in the
activation, so the conversion (most of a rule's cost) is paid once, and only for the top-level
fields the rules read (``project.py``).

A rule that errors on an object (a missing key, a bad quantity, a non-bool result) becomes a
finding of *that rule* at its failure action (``failurePolicy: Fail``: the rule's action;
``Ignore``: audit).  Nothing here raises into the engine, so one bad rule never turns into an
engine failure that ``failureMode: open`` would let through.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuguard.webhook.custom import celenv, project
from gpuguard.webhook.custom.compile import CompiledRule, CompiledValidation
from gpuguard.webhook.decision import ACTION_TO_VERDICT, RequestContext, Violation
from gpuguard.workloads.view import PodTemplate, WorkloadView

log = logging.getLogger("gpuguard.custom")

#: Where an object-scope finding points when the validation gives no ``fieldPath``.
OBJECT_PATH = "metadata"


class RuleError(Exception):
    """A custom rule's expression failed on this object (the message says which and why)."""


def _base_variables(view: WorkloadView, ctx: RequestContext, namespace: str | None,
                    reads: dict[str, frozenset[str] | None]) -> dict[str, Any]:
    api_version = view.obj.get("apiVersion")
    version = api_version.rsplit("/", 1)[-1] if isinstance(api_version, str) else ""
    per_pod = max((t.gpus_per_pod for t in view.templates), default=0)
    meta = view.obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return {
        "object": project.project(view.obj, reads["object"]),
        "oldObject": project.project(ctx.old_object, reads["oldObject"]) if isinstance(ctx.old_object, dict) else None,
        "request": {
            "operation": ctx.operation,
            "namespace": namespace or "",
            "name": name if isinstance(name, str) else "",
            "userInfo": {"username": ctx.username, "groups": list(ctx.groups)},
            "kind": {"group": view.kind.group, "version": version, "kind": view.kind.kind},
        },
        "namespaceObject": ({"metadata": {"name": namespace, "labels": dict(ctx.namespace_labels)}}
                            if namespace else None),
        "workload": {
            "kind": view.kind.kind,
            "group": view.kind.group,
            "apiVersion": api_version if isinstance(api_version, str) else "",
            "name": view.name,
            "class": view.workload_class,
            "acceleratorsPerPod": per_pod,
            "acceleratorsTotal": view.total_gpus,
            "acceleratorsByResource": view.gpus_by_resource(),
            "pods": view.pod_count(),
        },
        "variables": {},
    }


def _template_variables(template: PodTemplate, reads: dict[str, frozenset[str] | None]) -> dict[str, Any]:
    return {
        "podSpec": project.project(template.pod_spec(), reads["podSpec"]),
        "podMetadata": template.metadata() or {},
        "template": {"role": template.ref.role, "replicas": template.ref.replicas,
                     "acceleratorsPerPod": template.gpus_per_pod, "path": template.where},
    }


def _run(program: Any, activation: Any, what: str) -> Any:
    """A result as plain Python values (lists and maps converted, so they can feed another activation)."""
    try:
        value = program.eval(activation)
    except Exception as exc:  # a Python helper or the binding itself failed: still this rule's error
        raise RuleError(f"{what}: {type(exc).__name__}: {exc}") from None
    if celenv.is_error(value):
        raise RuleError(f"{what}: {value.value()}")
    return value.plain_value()


def _bool(program: Any, activation: Any, what: str) -> bool:
    """A condition's or validation's result; anything but a bool is this rule's error."""
    try:
        value = program.eval(activation)
    except Exception as exc:
        raise RuleError(f"{what}: {type(exc).__name__}: {exc}") from None
    result = value.value()
    if result is True or result is False:  # the hot path: no type inspection
        return result
    if celenv.is_error(value):
        raise RuleError(f"{what}: {result}")
    raise RuleError(f"{what}: evaluated to {type(result).__name__}, not bool")


def _message(validation: CompiledValidation, activation: Any) -> str:
    """VAP's order: messageExpression when it yields a non-empty string, else message, else the expression."""
    spec = validation.spec
    if validation.message_program is not None:
        try:
            text = _run(validation.message_program, activation, "messageExpression")
            if isinstance(text, str) and text.strip():
                return text.strip()
        except RuleError as exc:
            log.debug("custom policy messageExpression failed, using message: %s", exc)
    return spec.message or f"failed expression: {spec.expression}"


def _path(base: str, field_path: str | None) -> str:
    """``fieldPath`` under the template's PodSpec path (or the object root); ``metadata`` when neither."""
    if not field_path:
        return base or OBJECT_PATH
    field_path = field_path.lstrip(".")
    if not base:
        return field_path
    return base + field_path if field_path.startswith("[") else f"{base}.{field_path}"


def _evaluate_rule(rule: CompiledRule, action: str, data: dict[str, Any], shared: Any, path: str,
                   target: str) -> list[Violation]:
    """The findings of one rule for one object or pod template.

    ``shared`` is the activation of ``data`` that every rule without ``variables`` reuses.
    """
    policy = rule.policy
    verdict = ACTION_TO_VERDICT[action]
    try:
        activation = shared
        if rule.variables:
            env = celenv.runtime()
            named: dict[str, Any] = {}
            data = {**data, "variables": named}
            for name, program in rule.variables:
                named[name] = _run(program, env.Activation(data), f"variables.{name}")
            activation = env.Activation(data)
        for name, program in rule.conditions:
            if not _bool(program, activation, f"matchConditions {name}"):
                return []
        out = []
        for i, validation in enumerate(rule.validations):
            if not _bool(validation.program, activation, f"validations[{i}]"):
                fix = (validation.spec.fix or policy.description or policy.title
                       or f"make `{validation.spec.expression}` hold")
                out.append(Violation(policy.id, verdict, _path(path, validation.spec.field_path),
                                     _message(validation, activation), fix, target))
        return out
    except RuleError as exc:
        log.debug("custom policy %s could not be evaluated: %s", policy.id, exc)
        error_verdict = verdict if policy.failure_policy == "Fail" else "audit"
        return [Violation(policy.id, error_verdict, path or OBJECT_PATH, f"the rule could not be evaluated ({exc})",
                          f"ask the cluster admins to fix custom policy {policy.id}, or change the field it reads",
                          target)]


_MERGED: dict[int, tuple[tuple, dict]] = {}


def _merged_reads(rules: tuple[tuple[CompiledRule, str], ...]) -> dict[str, frozenset[str] | None]:
    """The merged reads of a policy set's rules, computed once per (long-lived) rules tuple."""
    cached = _MERGED.get(id(rules))
    if cached is None or cached[0] is not rules:
        if len(_MERGED) > 64:  # configs reloaded many times: forget old policy sets
            _MERGED.clear()
        cached = _MERGED[id(rules)] = (rules, project.merge(rule.reads for rule, _ in rules))
    return cached[1]


def evaluate(view: WorkloadView, rules: tuple[tuple[CompiledRule, str], ...], ctx: RequestContext,
             namespace: str | None) -> list[Violation]:
    """Findings of the enabled custom ``rules`` (with their actions) on ``view``.

    ``namespace`` is the object's (or the request's, for objects without one), as the engine
    decided it for profiles.
    """
    if not rules:
        return []
    labels = ctx.namespace_labels
    active = [(rule, action) for rule, action in rules
              if rule.matches_everything or rule.matches(view.kind, view.workload_class, namespace, labels)]
    if not active:
        return []
    # Only the top-level fields the active rules read are handed to CEL (see project.py).
    reads = _merged_reads(rules) if len(active) == len(rules) else project.merge(rule.reads for rule, _ in active)
    base = _base_variables(view, ctx, namespace, reads)
    env = celenv.runtime()
    # One activation per pod template (the object's conversion is paid once per activation):
    # object-scope rules share the first template's, or a template-less one.
    templates = [(t, {**base, **_template_variables(t, reads)}) for t in view.templates]
    activations = [(t, data, env.Activation(data)) for t, data in templates]
    out: list[Violation] = []
    object_rules = [(rule, action) for rule, action in active if rule.scope == "object"]
    if object_rules:
        data, shared = (activations[0][1], activations[0][2]) if activations else (base, env.Activation(base))
        for rule, action in object_rules:
            out.extend(_evaluate_rule(rule, action, data, shared, "", ""))
    template_rules = [(rule, action) for rule, action in active if rule.scope == "podTemplate"]
    for template, data, shared in activations if template_rules else ():
        where = data["template"]["path"]
        for rule, action in template_rules:
            out.extend(_evaluate_rule(rule, action, data, shared, where, template.ref.role))
    return out
