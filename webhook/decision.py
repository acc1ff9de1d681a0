"""What the engine returns: the contract shared by the webhook server, the audit CLI and tests.

Kept free of any policy or server code so that every shell (HTTP, files, live cluster) can
import it cheaply and render the same decision its own way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

# Config actions (what an admin writes) and the verdict a violation carries.
ACTION_TO_VERDICT = {"enforce": "deny", "warn": "warn", "audit": "audit"}


@dataclass(frozen=True)
class RequestContext:
    """Who asks for what: the parts of an AdmissionRequest the policies may depend on."""

    operation: str = "CREATE"
    namespace: str | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict)
    username: str = ""
    groups: tuple[str, ...] = ()
    old_object: dict | None = None
    # Which halves of the engine run: the /mutate endpoint mutates only, /validate validates only,
    # `evaluate` and `audit` do both (validation then sees the mutated object, as the apiserver does).
    mutate: bool = True
    validate: bool = True
    # Reads another object a workload names (a TrainJob's runtime): (group, kind, namespace or None,
    # name) -> the object, or None when unknown.  The server serves it from its cache, the audit from
    # its input or the cluster; None here means nothing can be looked up.
    read_object: Callable[[str, str, str | None, str], dict | None] | None = None
    # Lists the objects of a kind a workload may select (the ServingRuntimes KServe chooses from by model
    # format): (group, kind, namespace or None) -> the objects, or None when they can't be listed.  Left
    # out, it is the ``list_objects`` method of ``read_object`` where that has one (``gpuguard.webhook.objects``).
    list_objects: Callable[[str, str, str | None], list[dict] | None] | None = None

    def __post_init__(self) -> None:
        if self.list_objects is None and self.read_object is not None:
            object.__setattr__(self, "list_objects", getattr(self.read_object, "list_objects", None))


@dataclass(frozen=True)
class Violation:
    """One finding of a validating policy (or a would-be change of a mutating one in warn/audit mode)."""

    policy: str
    verdict: str  # deny | warn | audit
    path: str  # dotted field path, e.g. spec.template.spec.containers[0]
    message: str  # what is wrong and why it matters
    fix: str  # the one-line fix
    target: str = ""  # a readable name for what the path points at, e.g. the container name
    # What the finding is about, stable across list reordering (``spec.containers[trainer]``): UPDATE
    # matches findings of the stored object by (policy, subject).
    subject: str = ""
    # Devices (resource, count) the finding says sit idle (``Finding.idle``): what the cost at risk prices.
    idle: tuple[tuple[str, int], ...] = ()

    @property
    def text(self) -> str:
        """The full sentence users see: ``[policy] path (target): message; fix.``"""
        where = f"{self.path} ({self.target})" if self.target else self.path
        return f"[{self.policy}] {where}: {self.message}; {self.fix.rstrip('.')}."

    def to_dict(self) -> dict[str, str]:
        return {"policy": self.policy, "action": self.verdict, "message": self.text, "path": self.path,
                "fix": self.fix}


_CHANGE_VALUE_LIMIT = 40


def _shown(value: Any) -> str:
    """A changed value as a warning shows it: strings as written, the rest as compact JSON, cut short."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= _CHANGE_VALUE_LIMIT else text[: _CHANGE_VALUE_LIMIT - 1] + "…"


@dataclass(frozen=True)
class Change:
    """A value the user set that a mutating policy changed: a cap applied, a field dropped, a list grown.

    Values gpuguard adds where the user set nothing are not changes: nothing in Git disagrees with
    them.  Every shell shows changes through :attr:`text` (the webhook as a kubectl warning, ``evaluate``,
    ``audit`` and ``fix`` in their reports), so they read the same everywhere.
    """

    policy: str
    path: str  # where, list items by name: spec.template.spec.containers[trainer].resources.limits.memory
    how: str  # capped | replaced | removed | extended (``old``/``new``: the list's lengths)
    old: Any
    new: Any
    kind: str = ""

    @property
    def text(self) -> str:
        """One line: ``[job-ttl] capped spec.ttlSecondsAfterFinished on the Job: 2592000 -> 604800 (...)``."""
        on = f" on the {self.kind}" if self.kind else ""
        if self.how == "extended":
            added = self.new - self.old if isinstance(self.new, int) and isinstance(self.old, int) else 1
            what = f"added {added} item{'s' if added != 1 else ''} to the user's {self.path}{on}"
        else:
            new = "(unset)" if self.how == "removed" else _shown(self.new)
            what = f"{self.how} {self.path}{on}: {_shown(self.old)} -> {new}"
        why = "the policy's maximum; " if self.how == "capped" else ""
        return f"[{self.policy}] {what} ({why}gpuguard fix writes it into Git)"

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "path": self.path, "how": self.how, "old": self.old, "new": self.new,
                "message": self.text}


@dataclass
class Decision:
    """The engine's answer for one object."""

    allowed: bool
    api_version: str
    kind: str
    namespace: str | None
    name: str | None
    original: Any
    mutated: Any
    patch: list[dict[str, Any]] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    mutated_by: list[str] = field(default_factory=list)
    # Values the user set that the mutating policies changed (caps, dropped fields, grown lists).
    changes: list[Change] = field(default_factory=list)
    # The class it was judged as; see ``workload_class``.
    judged_class: str | None = None
    gpus: int = 0  # GPUs the whole workload asks for (replicas x GPUs per pod)
    gpus_by_resource: dict[str, int] = field(default_factory=dict)
    skipped: str | None = None  # why the engine did not look (unknown kind, exempt namespace ...)
    error: str | None = None  # the engine could not read the object (see failureMode)
    # What the object names but the engine could not read (a runtime, a DRA claim): set with ``error``.
    # The webhook refuses it like any error; the CLI reports it as "not fully checked", a finding of its
    # own (the input lacks the object, which is not gpuguard failing).
    unresolved: str | None = None
    # The object itself is malformed (a quantity no policy can read): the webhook answers 422
    # Invalid, as the apiserver does for malformed objects, rather than 403 for a policy's denial.
    invalid: bool = False
    # How many of ``violations`` the mutating half found (warn-mode mutations, Knative take-backs) before the
    # validating half ran; ``None`` when no validating half ran.  ``gpuguard.webhook.engine.onepass`` splits
    # a create evaluated once into the two reviews' answers by it.
    validated_from: int | None = None
    # Reads the class when somebody asks: an object no policy judges (a CPU object no enabled policy acts on)
    # leaves the engine unclassified, and only a shell that prints the class (audit, evaluate, the scan) pays.
    class_reader: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @property
    def workload_class(self) -> str | None:
        """The class it is judged as (``gpuguard.workloads.lifecycle``), read on first use where the engine
        deferred it (``class_reader``)."""
        if self.judged_class is None and self.class_reader is not None:
            reader, self.class_reader = self.class_reader, None
            self.judged_class = reader()
        return self.judged_class

    @workload_class.setter
    def workload_class(self, value: str | None) -> None:
        self.judged_class, self.class_reader = value, None

    @property
    def accelerators(self) -> dict[str, int]:
        """Accelerators the whole workload asks for, by resource (``nvidia.com/gpu``: 8); {} for none."""
        return {k: int(v) for k, v in (self.gpus_by_resource or {}).items() if v} or (
            {"nvidia.com/gpu": self.gpus} if self.gpus else {})

    @property
    def denials(self) -> list[Violation]:
        return [v for v in self.violations if v.verdict == "deny"]

    @property
    def warnings(self) -> list[Violation]:
        return [v for v in self.violations if v.verdict == "warn"]

    @property
    def audits(self) -> list[Violation]:
        return [v for v in self.violations if v.verdict == "audit"]

    def result_entry(self, source: str | None = None, index: int | None = None) -> dict[str, Any]:
        """The ``results[]`` entry of the audit JSON contract (``docs/audit.md``, "JSON contract"; keys are
        only ever added, and ``docs/audit-result.schema.json`` checks them).  ``gpuguard evaluate
        --format json`` prints the same entries, so scripts can switch between the two commands."""
        entry: dict[str, Any] = {
            "source": source,
            "index": index,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "allowed": self.allowed,
            "workloadClass": self.workload_class,
            "gpus": self.gpus,
            "gpusByResource": dict(self.gpus_by_resource),
            "violations": [v.to_dict() for v in self.violations],
            "mutatedBy": list(self.mutated_by),
            "patch": self.patch,
            "changes": [c.to_dict() for c in self.changes],
        }
        if self.skipped:
            entry["skipped"] = self.skipped
        if self.error:
            entry["error"] = self.error
        return entry


# A PolicyReport result's ``category``, the same in the scan's reports (``webhook/scan/report.py``) and the
# audit's ``-o policyreport``: the accelerator resources the workload asks for, so Policy Reporter groups
# findings by accelerator in both.
NO_ACCELERATOR_CATEGORY = "no accelerator"


def report_category(decision: Decision | None) -> str:
    """``nvidia.com/gpu``, ``amd.com/gpu, nvidia.com/gpu`` (sorted), or ``no accelerator`` (none, or no decision)."""
    return ", ".join(sorted(decision.accelerators if decision is not None else {})) or NO_ACCELERATOR_CATEGORY


NOT_FULLY_CHECKED = "not-fully-checked"
NOT_FULLY_CHECKED_TITLE = "Objects a workload names are there to check it with"
NOT_FULLY_CHECKED_FIX = ("put it in the input (the same files or directory), or read it from the cluster with "
                         "gpuguard audit --lookup-cluster")


def unresolved_as_finding(decision: Decision) -> Decision:
    """For reports on files: an object naming something the input lacks (a runtime, a DRA claim) as a finding.

    The webhook refuses such an object like any it can't judge; a CI audit of manifests that
    leave the cluster's runtimes out is not gpuguard failing, so it gets a ``not-fully-checked``
    deny finding (which ``--fail-on`` weighs like any other) instead of an engine error (exit 2).
    """
    if not decision.unresolved or not decision.error:
        return decision
    finding = Violation(policy=NOT_FULLY_CHECKED, verdict="deny", path="spec",
                        message=f"not fully checked: {decision.error}", fix=NOT_FULLY_CHECKED_FIX,
                        subject=f"unresolved:{decision.unresolved}")
    return replace(decision, error=None, allowed=False, violations=[*decision.violations, finding])
