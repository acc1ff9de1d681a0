"""The ``customPolicies`` config schema: ValidatingAdmissionPolicy's dialect plus gpuguard's matching.

Field names follow VAP (``validations[].expression``, ``message``, ``messageExpression``,
``reason``, ``fieldPath``, ``matchConditions``, ``variables``, ``failurePolicy``) so that an
admin can move a VAP rule here by copying it; gpuguard adds what VAP cannot express: the scope
(``podTemplate`` runs on every pod template of every ML kind), workload classes, and the same
``action`` / profiles every built-in policy has.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from gpuguard.policies.base import Action, ConfigModel

#: Ids are shown to users and used as profile keys: kebab-case, like the built-in policies.
ID_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
#: CEL identifiers (what a ``variables[].name`` may be).
IDENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class Validation(ConfigModel):
    """One CEL check: the object passes when ``expression`` is true."""

    expression: str = Field(min_length=1, description="CEL expression that must evaluate to true.")
    message: str | None = Field(None, description="Shown when the expression is false.")
    message_expression: str | None = Field(None, description="CEL expression returning the message; falls back "
                                           "to `message` when it fails.")
    reason: Literal["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"] = Field(
        "Invalid", description="VAP's reason; accepted for compatibility (see docs/custom-policies.md).")
    field_path: str | None = Field(None, description="Where the finding points, relative to the PodSpec "
                                   "(podTemplate scope) or the object (object scope), e.g. `containers[0].image`.")
    fix: str | None = Field(None, description="The one-line fix shown with the finding.")


class MatchCondition(ConfigModel):
    """VAP's matchConditions: the rule applies only when every condition is true."""

    name: str = Field(min_length=1)
    expression: str = Field(min_length=1)


class Variable(ConfigModel):
    """VAP's variables: named CEL values, readable as ``variables.<name>`` by later expressions."""

    name: str = Field(pattern=IDENT_PATTERN)
    expression: str = Field(min_length=1)


class CustomMatch(ConfigModel):
    """Which objects a rule looks at.  Every criterion given must hold; an empty list matches all."""

    kinds: list[str] = Field(default_factory=list, description="Kinds (`PyTorchJob`) or group/kinds "
                             "(`batch.volcano.sh/Job`) from `gpuguard kinds`; empty: every kind.")
    classes: list[Literal["training", "inference", "notebook"]] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list, description="Namespace names or globs.")
    namespace_labels: dict[str, str] = Field(default_factory=dict, description="Labels the namespace must have.")


class CustomPolicy(ConfigModel):
    """One admin rule."""

    id: str = Field(pattern=ID_PATTERN, description="Stable kebab-case id, shown in findings.")
    title: str = ""
    description: str = ""
    scope: Literal["podTemplate", "object"] = Field(
        "podTemplate", description="podTemplate: once per pod template of every kind; object: once per object.")
    action: Action = "enforce"
    failure_policy: Literal["Fail", "Ignore"] = Field(
        "Fail", description="An expression that errors: Fail reports it at the rule's action, Ignore as audit.")
    match: CustomMatch = Field(default_factory=CustomMatch)
    match_conditions: list[MatchCondition] = Field(default_factory=list)
    variables: list[Variable] = Field(default_factory=list)
    validations: list[Validation] = Field(min_length=1)

    @field_validator("action", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted ``off`` as ``false``; admins mean the action ``off``."""
        return "off" if value is False else value
