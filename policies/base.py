"""The policy contract: what every policy declares, and the settings base every policy's settings extend.

A policy is data plus two functions: its stable id (shown to users), a title, its phase
(``MutatingPolicy`` or ``ValidatingPolicy``), its settings model, its default action,
``run(view, settings)``, and ``cpu_scope(settings)``: which objects without accelerators it
may act on (the webhook's matchConditions keep every other one away from gpuguard).

A mutating ``run`` edits the working copy through the view and returns whether it changed
anything (which names it in the ``gpuguard.io/mutated-by`` annotation; cheaper than comparing
snapshots of the object); a validating ``run`` yields ``Finding``s.  Neither ever sees an
AdmissionReview or builds a patch: that keeps policies testable alone and the webhook and
audit identical.  A policy's passing example manifest is a data file,
``policies/examples/<id>.yaml``, which the fixture suite runs.  Adding a policy:
``docs/contributing.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
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
    ``idle``: devices (resource, count) the finding says sit unused for as long as the workload runs, so the
    audit's cost at risk prices those devices alone (``gpuguard.webhook.cli.audit.cost``).
    """

    path: Path
    message: str
    fix: str
    target: str = ""
    advisory: bool = False
    idle: tuple[tuple[str, int], ...] = ()


class MutateFn(Protocol):
    """A mutating policy's ``run``: edit the object through the view; return whether anything changed.

    ``settings`` is the policy's own ``PolicySettings`` subclass, already validated.
    """

    def __call__(self, view: WorkloadView, settings: Any, /) -> bool: ...


class ValidateFn(Protocol):
    """A validating policy's ``run``: read the view, yield what is wrong (nothing: it passes)."""

    def __call__(self, view: WorkloadView, settings: Any, /) -> Iterable[Finding]: ...


@dataclass(frozen=True)
class CpuScope:
    """Which objects without accelerators a policy may act on under given settings.

    ``everything``: any of them (``reason`` says why, after the policy id); else only those using one of
    ``priority_classes`` (in a pod template or where the kind keeps one, ``KindSpec.priority_class_paths``).
    An object neither covers is never sent to the webhook (``gpuguard.webhook.cli.match_conditions``).
    """

    everything: bool = False
    priority_classes: frozenset[str] = frozenset()
    reason: str = ""


class CpuScopeFn(Protocol):
    """A policy's ``cpu_scope``: given its validated settings, the CPU objects it may act on."""

    def __call__(self, settings: Any, /) -> CpuScope: ...


def any_cpu_object(settings: Any, /) -> CpuScope:
    """The default: a policy that does not say otherwise may act on any object, so all are sent (a webhook
    that misses objects a policy should judge is worse than one called too often)."""
    return CpuScope(everything=True, reason="may act on CPU objects (it declares no cpu_scope)")


def accelerator_objects_only(settings: Any, /) -> CpuScope:
    """For a policy that changes and reports nothing on an object without accelerators, whatever its settings."""
    return CpuScope()


def cpu_objects_if(switched_on: bool) -> CpuScope:
    """For a policy a setting extends to CPU objects: all of them when ``switched_on``, else none."""
    return CpuScope(everything=True, reason="is configured to act on CPU objects") if switched_on else CpuScope()


def example_file(policy_id: str) -> Traversable:
    """Where a policy's passing example manifest ships: ``examples/<id>.yaml`` in this package."""
    return resources.files(__package__).joinpath("examples", f"{policy_id}.yaml")


@cache
def example_text(policy_id: str) -> str:
    """A policy's passing example, read on first use (``gpuguard explain``, SARIF rule help), not at import;
    the fixture suite runs each as a passing case (``gpuguard.webhook.suite.run_example``)."""
    return example_file(policy_id).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Policy:
    """What both phases declare.  Build a ``MutatingPolicy`` or a ``ValidatingPolicy``, never this."""

    id: str  # kebab-case, stable: users write it in configs and read it in findings
    title: str
    settings_model: type[PolicySettings]
    description: str
    rationale: str
    phase: ClassVar[Phase]
    # Which CPU-only objects it may act on; a policy that acts on accelerator objects only says so.
    cpu_scope: CpuScopeFn = field(default=any_cpu_object, kw_only=True)

    @property
    def default_action(self) -> str:
        return self.settings_model.model_fields["action"].default

    @property
    def example(self) -> str:
        """A manifest that passes this policy (nothing denied, warned about or changed): ``examples/<id>.yaml``."""
        return example_text(self.id)


@dataclass(frozen=True)
class MutatingPolicy(Policy):
    run: MutateFn
    phase: ClassVar[Phase] = "mutating"
    # The fields it writes, each relative to every pod spec of the object (``tolerations``,
    # ``containers[].resources``) or a job field of the kind table (``job.ttl``: ``KindSpec.job.ttl``):
    # the fields GitOps tools are told gpuguard owns (``docs/gitops.md``, generated).  A fixture test
    # fails when a policy writes outside them.
    writes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class ValidatingPolicy(Policy):
    run: ValidateFn
    phase: ClassVar[Phase] = "validating"
