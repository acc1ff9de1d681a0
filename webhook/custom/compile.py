"""Compile ``customPolicies`` once, when the config loads.

Every expression (validations, messageExpressions, matchConditions, variables) is parsed and
type-checked here, in the environment of the rule's scope, so that a typo or an unknown
variable is refused at load with ``file:line`` and CEL's own position and caret, never found
on a user's request.  The engine's hot path only evaluates the compiled programs.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from typing import Any

from gpuguard.webhook.custom import celenv, project
from gpuguard.webhook.custom.model import CustomPolicy, Validation
from gpuguard.workloads import kinds as kinds_mod

#: ``where(loc)`` -> ``"file:line"`` for a key path of the config document.
Where = Callable[[tuple], str]


class CustomPolicyError(ValueError):
    """A custom rule gpuguard refuses at load; the message is ``file:line: reason``."""


@dataclass(frozen=True)
class CompiledValidation:
    spec: Validation
    program: Any
    message_program: Any | None


@dataclass(frozen=True)
class CompiledRule:
    """One custom rule, ready to run: its programs and its match criteria."""

    policy: CustomPolicy
    conditions: tuple[tuple[str, Any], ...]
    variables: tuple[tuple[str, Any], ...]
    validations: tuple[CompiledValidation, ...]
    kinds: frozenset[tuple[str | None, str]]  # (group or None for "any group", kind)
    reads: dict[str, frozenset[str] | None]  # top-level fields of object/oldObject/podSpec it reads
    reads_namespace_object: bool = False  # mentions namespaceObject (whose labels the server looks up)

    @cached_property
    def matches_everything(self) -> bool:
        """No match criterion at all: the engine skips :meth:`matches` (the common case)."""
        match = self.policy.match
        return not (self.kinds or match.classes or match.namespaces or match.namespace_labels)

    @property
    def id(self) -> str:
        return self.policy.id

    @property
    def scope(self) -> str:
        return self.policy.scope

    def matches(self, kind: kinds_mod.KindSpec, workload_class: str, namespace: str | None,
                namespace_labels: dict[str, str]) -> bool:
        """Every criterion the admin gave holds (an empty criterion matches everything)."""
        match = self.policy.match
        if self.kinds and (kind.group, kind.kind) not in self.kinds and (None, kind.kind) not in self.kinds:
            return False
        if match.classes and workload_class not in match.classes:
            return False
        if match.namespaces and not (namespace and any(fnmatchcase(namespace, p) for p in match.namespaces)):
            return False
        return all(namespace_labels.get(k) == v for k, v in match.namespace_labels.items())


def cel_error_text(exc: BaseException) -> str:
    """cel-expr-python's status text without its status codes, positions kept.

    ``INVALID_ARGUMENT: ERROR: <input>:1:5: Syntax error: ... | foo( | ....^ [INVALID_ARGUMENT]``
    -> ``CEL error at 1:5: Syntax error: ...`` plus the caret lines.
    """
    text = str(exc).strip()
    text = re.sub(r"^[A-Z_]+: ", "", text)
    text = re.sub(r"\s*\[[A-Z_]+\]$", "", text)
    return text.replace("ERROR: <input>:", "CEL error at ")


def _compile(expression: str, scope: str, results: frozenset[str] | None, want: str, loc: tuple, where: Where) -> Any:
    env = celenv.environment(scope)
    try:
        program = env.compile(expression)
    except Exception as exc:  # cel-expr-python raises RuntimeError with the status text
        detail = cel_error_text(exc)
        if "undeclared reference" in detail:
            detail += f"\n  ({scope} scope variables: {', '.join(celenv.variables_for(scope))})"
        raise CustomPolicyError(f"{where(loc)}: {_dotted(loc)}: {detail}") from None
    result = program.return_type().name()
    if results is not None and result not in results:
        raise CustomPolicyError(f"{where(loc)}: {_dotted(loc)}: the expression evaluates to {result.lower()}, "
                                f"it must evaluate to {want}")
    # Checked in the scope's environment; run in the shared one (same declarations, more variables).
    return celenv.runtime().compile(expression)


def _dotted(loc: tuple) -> str:
    out = ""
    for step in loc:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def _kinds(policy: CustomPolicy, loc: tuple, where: Where) -> frozenset[tuple[str | None, str]]:
    known = {(k.group, k.kind) for k in kinds_mod.KINDS}
    # Kinds whose pod templates live in another object (a Trainer TrainJob and its runtime) are
    # judged as the object their operator makes from both: a rule matching them would never fire.
    judged_as = {(k.group, k.kind) for k in kinds_mod.KINDS if getattr(k, "runtime", None) is not None}
    out: set[tuple[str | None, str]] = set()
    for i, name in enumerate(policy.match.kinds):
        group, _, kind = name.rpartition("/")
        entry: tuple[str | None, str] = (group if "/" in name else None, kind)
        if (entry[0] is None and not any(k == kind for _, k in known)) or (entry[0] is not None and entry not in known):
            names = sorted({k for _, k in known})
            raise CustomPolicyError(f"{where(loc + ('match', 'kinds', i))}: unknown kind {name!r} "
                                    f"(known: {', '.join(names)}; write group/Kind, e.g. batch.volcano.sh/Job, "
                                    "for one group)")
        if any(k == kind and (entry[0] is None or g == entry[0]) for g, k in judged_as):
            raise CustomPolicyError(f"{where(loc + ('match', 'kinds', i))}: {name} names its pod templates in a "
                                    "runtime and is judged as the JobSet made from both: match JobSet instead")
        out.add(entry)
    return frozenset(out)


def compile_rule(policy: CustomPolicy, loc: tuple, where: Where) -> CompiledRule:
    scope = policy.scope
    conditions = tuple(
        (c.name, _compile(c.expression, scope, celenv.BOOL_RESULTS, "bool", loc + ("matchConditions", i, "expression"),
                          where))
        for i, c in enumerate(policy.match_conditions))
    variables = tuple(
        (v.name, _compile(v.expression, scope, None, "a value", loc + ("variables", i, "expression"), where))
        for i, v in enumerate(policy.variables))
    validations = []
    for i, v in enumerate(policy.validations):
        program = _compile(v.expression, scope, celenv.BOOL_RESULTS, "bool", loc + ("validations", i, "expression"),
                           where)
        message = None
        if v.message_expression:
            message = _compile(v.message_expression, scope, celenv.STRING_RESULTS, "string",
                               loc + ("validations", i, "messageExpression"), where)
        validations.append(CompiledValidation(v, program, message))
    expressions = [c.expression for c in policy.match_conditions] + [v.expression for v in policy.variables] + [
        e for v in policy.validations for e in (v.expression, v.message_expression) if e]
    return CompiledRule(policy, conditions, variables, tuple(validations), _kinds(policy, loc, where),
                        project.fields_read(expressions), any("namespaceObject" in e for e in expressions))


class CustomRules:
    """Every compiled custom rule of a config, by id (in file order)."""

    def __init__(self, rules: list[CompiledRule]):
        self.rules = {rule.id: rule for rule in rules}
        # Whether the webhook must look namespace labels up (serve --namespace-labels) for these rules.
        self.uses_namespace_labels = any(rule.policy.match.namespace_labels or rule.reads_namespace_object
                                         for rule in rules)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __contains__(self, policy_id: object) -> bool:
        return policy_id in self.rules

    def resolve(self, overrides: dict[str, Any], prefix: tuple, where: Where) -> tuple[tuple[CompiledRule, str], ...]:
        """The enabled rules with their action after ``overrides`` (``policies:`` of the base or a profile).

        A profile may set a custom rule's ``action`` like any built-in policy's; nothing else of
        it, since the rule itself is one definition shared by every profile.
        """
        out = []
        for rule_id, rule in self.rules.items():
            action = rule.policy.action
            values = overrides.get(rule_id)
            if values is not None:
                unknown = sorted(set(values) - {"action"})
                if unknown:
                    raise CustomPolicyError(f"{where(prefix + (rule_id, unknown[0]))}: custom policy {rule_id!r}: "
                                            f"only `action` can be set here, not {unknown[0]!r}")
                action = values.get("action", action)
                action = "off" if action is False else action
                if action not in ("enforce", "warn", "audit", "off"):
                    raise CustomPolicyError(f"{where(prefix + (rule_id, 'action'))}: custom policy {rule_id!r}: "
                                            f"action must be enforce, warn, audit or off, not {action!r}")
            if action != "off":
                out.append((rule, action))
        return tuple(out)


def compile_rules(policies: list[CustomPolicy], builtin_ids: set[str], where: Where) -> CustomRules:
    """Compile every rule; refuse duplicate ids and ids of built-in policies."""
    compiled: list[CompiledRule] = []
    seen: set[str] = set()
    for i, policy in enumerate(policies):
        loc = ("customPolicies", i)
        if policy.id in builtin_ids:
            raise CustomPolicyError(f"{where(loc + ('id',))}: customPolicies[{i}].id: {policy.id!r} is a built-in "
                                    "policy; choose another id")
        if policy.id in seen:
            raise CustomPolicyError(f"{where(loc + ('id',))}: customPolicies[{i}].id: duplicate id {policy.id!r}")
        seen.add(policy.id)
        compiled.append(compile_rule(policy, loc, where))
    return CustomRules(compiled)
