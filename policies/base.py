"""The policy contract: what every policy declares, and the settings base every policy's settings extend.

A policy is data plus one function: its stable id (shown to users), a title, its phase
(``MutatingPolicy`` or ``ValidatingPolicy``), its settings model, its default action, and
``run(view, settings)``.  A mutating ``run`` edits the working copy through the view and
returns whether it changed anything (which names it in the ``gpuguard.io/mutated-by``
annotation; cheaper than comparing snapshots of the object); a validating ``run`` yields
``Finding``s.  Neither ever sees an AdmissionReview or builds a patch: that keeps policies
testable alone and the webhook and audit identical.  Adding a policy: ``docs/contributing.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from gpuguard.workloads.paths import Path
from gpuguard.workloads.view import WorkloadView

Action = Literal["enforce", "warn", "audit", "off"]
Phase = Literal["mutating", "validating"]


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


class MutateFn(Protocol):
    """A mutating policy's ``run``: edit the object through the view; return whether anything changed.

    ``settings`` is the policy's own ``PolicySettings`` subclass, already validated.
    """

    def __call__(self, view: WorkloadView, settings: Any, /) -> bool: ...


class ValidateFn(Protocol):
    """A validating policy's ``run``: read the view, yield what is wrong (nothing: it passes)."""

    def __call__(self, view: WorkloadView, settings: Any, /) -> Iterable[Finding]: ...


@dataclass(frozen=True)
class Policy:
    """What both phases declare.  Build a ``MutatingPolicy`` or a ``ValidatingPolicy``, never this."""

    id: str  # kebab-case, stable: users write it in configs and read it in findings
    title: str
    settings_model: type[PolicySettings]
    description: str
    rationale: str
    example: str  # a passing manifest, equal to tests/policies/<id>/example/input.yaml
    phase: ClassVar[Phase]

    @property
    def default_action(self) -> str:
        return self.settings_model.model_fields["action"].default


@dataclass(frozen=True)
class MutatingPolicy(Policy):
    run: MutateFn
    phase: ClassVar[Phase] = "mutating"


@dataclass(frozen=True)
class ValidatingPolicy(Policy):
    run: ValidateFn
    phase: ClassVar[Phase] = "validating"
