"""What every policy declares, and the settings base every policy's settings extend.

A policy is data plus one function: its stable id (shown to users), a title, whether it
mutates or validates, its settings model, its default action, and ``run``.  A mutating
``run(view, settings)`` edits the working copy through the view and returns whether it
changed anything (which names it in the ``gpuguard.io/mutated-by`` annotation; cheaper than
comparing snapshots of the object); a validating
``run(view, settings)`` yields ``Finding``s.  Neither ever sees an AdmissionReview or
builds a patch: that keeps policies testable alone and the webhook and audit identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from workloads.paths import Path

Action = Literal["enforce", "warn", "audit", "off"]


class ConfigModel(BaseModel):
    """Base of every config model: camelCase keys as Kubernetes users write them, unknown keys refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class PolicySettings(ConfigModel):
    """Settings every policy has."""

    action: Action = "enforce"

    @field_validator("action", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        """YAML 1.1 reads an unquoted ``off`` as ``false``; admins mean the action ``off``."""
        return "off" if value is False else value


@dataclass(frozen=True)
class Finding:
    """One thing a validating policy found wrong.

    ``advisory`` findings are never stronger than ``warn`` (e.g. memory per GPU under the
    floor), whatever the policy's action: the policy denies only what would really fail.
    """

    path: Path
    message: str
    fix: str
    target: str = ""
    advisory: bool = False


@dataclass(frozen=True)
class Policy:
    id: str
    title: str
    mutating: bool
    settings_model: type[PolicySettings]
    run: Callable[..., Any]
    description: str
    rationale: str
    example: str

    @property
    def default_action(self) -> str:
        return self.settings_model.model_fields["action"].default

    @property
    def kind(self) -> str:
        return "mutating" if self.mutating else "validating"


MutateFn = Callable[[Any, Any], bool]
ValidateFn = Callable[[Any, Any], Iterable[Finding]]
