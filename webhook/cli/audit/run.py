"""The audit itself: every object through the engine, one at a time, and the counts and exit code.

Files and live clusters differ only in where objects come from and which ``RequestContext``
each gets; both end here as ``(Document, RequestContext)`` pairs so the decision, the
summary and the exit code are computed one way.  Each ``AuditItem`` is counted in the
``AuditReport`` (``Tally``) and handed to the format, then dropped: memory does not grow with
the number of objects.  Formats never re-derive counts from decisions themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.cli.audit import cost
from gpuguard.webhook.decision import Decision, RequestContext, unresolved_as_finding
from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpuguard.webhook.catalog import PolicyInfo
    from gpuguard.webhook.manifests import Document
    from gpuguard.workloads.accelerators import Accelerators

# --fail-on level -> the verdicts that fail the audit (exit 1) at that level: each level a policy action gives
# (enforce -> deny, warn, audit) counts itself and everything above it; never counts nothing.
FAILING: dict[str, frozenset[str]] = {"deny": frozenset({"deny"}), "warn": frozenset({"deny", "warn"}),
                                      "audit": frozenset({"deny", "warn", "audit"}), "never": frozenset()}
FAIL_ON = tuple(FAILING)
VERDICTS = ("deny", "warn", "audit")
ENGINE_ERROR = "engine-error"
NO_NAMESPACE = "(none)"

Evaluate = Callable[[dict, RequestContext], Decision]


@dataclass
class AuditItem:
    """One document's outcome: a decision, or the reason there is none."""

    doc: Document
    decision: Decision | None = None
    namespace: str | None = None
    engine_error: str | None = None  # evaluate() raised: a bug, reported rather than fatal
    cost: cost.WorkloadCost | None = None

    @property
    def obj(self) -> dict[str, Any]:
        return self.doc.obj if isinstance(self.doc.obj, dict) else {}

    @property
    def error(self) -> str | None:
        """Why this document got no usable decision (input, engine crash or engine error)."""
        if self.doc.error:
            return self.doc.error.message
        if self.engine_error:
            return self.engine_error
        return self.decision.error if self.decision is not None else None

    @property
    def error_type(self) -> str | None:
        if self.doc.error:
            return self.doc.error.kind
        return ENGINE_ERROR if self.error else None

    @property
    def is_input_error(self) -> bool:
        return self.doc.error is not None

    @property
    def is_workload(self) -> bool:
        """Evaluated by the engine: a decision, not skipped, no error."""
        return self.decision is not None and not self.decision.skipped and not self.error

    @property
    def violations(self) -> list:
        return list(self.decision.violations) if self.is_workload and self.decision else []

    @property
    def mutated_by(self) -> list[str]:
        return list(self.decision.mutated_by) if self.is_workload and self.decision else []

    @property
    def patch(self) -> list[dict[str, Any]]:
        return list(self.decision.patch) if self.is_workload and self.decision else []

    @property
    def api_version(self) -> str | None:
        return self.decision.api_version if self.decision else _str(self.obj.get("apiVersion"))

    @property
    def kind(self) -> str | None:
        return self.decision.kind if self.decision else _str(self.obj.get("kind"))

    @property
    def name(self) -> str | None:
        if self.decision and self.decision.name:
            return self.decision.name
        meta = self.obj.get("metadata")
        if isinstance(meta, dict):
            return _str(meta.get("name")) or _str(meta.get("generateName"))
        return None

    @property
    def namespace_key(self) -> str:
        return self.namespace or NO_NAMESPACE

    @property
    def label(self) -> str:
        """``Kind namespace/name`` as kubectl users say it."""
        name = self.name or "(unnamed)"
        kind = self.kind or "?"
        return f"{kind} {self.namespace}/{name}" if self.namespace else f"{kind} {name}"

    @property
    def verdict(self) -> str:
        """One word per item: error, skipped, deny, warn, audit, mutate or pass."""
        if self.error:
            return "error"
        if self.decision is None or self.decision.skipped:
            return "skipped"
        verdicts = {v.verdict for v in self.decision.violations}
        for verdict in VERDICTS:
            if verdict in verdicts:
                return verdict
        if not self.decision.allowed:
            return "deny"
        return "mutate" if self.decision.patch else "pass"

    def entry(self) -> dict[str, Any]:
        """This item's ``results[]`` entry of the JSON output (docs/audit-result.schema.json)."""
        doc = self.doc
        where: dict[str, Any] = {"line": doc.line, "column": doc.column}
        if doc.item is not None:
            where["item"] = doc.item
        if self.decision is not None and not self.engine_error:
            entry = self.decision.result_entry(doc.source, doc.index)
            if entry.get("namespace") is None and self.namespace:
                entry["namespace"] = self.namespace
            entry.update(where)
            if self.decision.error:
                entry["errorType"] = ENGINE_ERROR
            if self.cost is not None:
                entry["costAtRisk"] = self.cost.to_dict()
            return entry
        entry = {"source": doc.source, "index": doc.index, **where}
        if self.kind:
            entry.update(apiVersion=self.api_version, kind=self.kind, namespace=self.namespace,
                         name=self.name)
        entry.update(error=self.error, errorType=self.error_type)
        return entry


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def evaluate_all(pairs: Iterable[tuple[Document, RequestContext | None]], evaluate: Evaluate,
                 prices: cost.Prices,
                 on_item: Callable[[AuditItem], None] | None = None) -> Iterator[AuditItem]:
    """Run the engine over every object, one at a time (nothing of an item is kept once it is handed
    out); an exception costs one item, never the audit."""
    for doc, ctx in pairs:
        item = _evaluate_one(doc, ctx, evaluate, prices)
        if on_item is not None:
            on_item(item)
        yield item


def _evaluate_one(doc: Document, ctx: RequestContext | None, evaluate: Evaluate, prices: cost.Prices) -> AuditItem:
    if doc.error is not None or doc.obj is None or ctx is None:
        return AuditItem(doc, namespace=ctx.namespace if ctx else None)
    try:
        decision = unresolved_as_finding(evaluate(doc.obj, ctx))
    except Exception as exc:  # a policy bug must not hide every other finding
        failure = f"the engine failed on this object: {type(exc).__name__}: {exc}"
        return AuditItem(doc, namespace=ctx.namespace, engine_error=failure)
    item = AuditItem(doc, decision, namespace=decision.namespace or ctx.namespace)
    if item.is_workload and not doc.finished and not cost.is_finished(doc.obj):
        item.cost = cost.workload_cost(decision, prices)
    return item


def unknown_accelerators(obj: Any, accelerators: Accelerators) -> list[str]:
    """Extended resources the object's pod templates ask for that may be accelerators (vendor-domain names) but
    that no profile, shipped, configured or learned from ``--nodes``/DeviceClasses, counts: not counted, and
    said in the report's notes rather than passed over in silence."""
    from gpuguard.workloads import kinds

    kind = kinds.lookup(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    if kind is None:
        return []
    names: set[str] = set()
    for ref in kind.locate(obj):
        spec = kinds.get_path(obj, ref.spec_path)
        if not isinstance(spec, dict):
            continue
        for list_name in ("containers", "initContainers"):
            for container in spec.get(list_name) or () if isinstance(spec.get(list_name), list) else ():
                resources = container.get("resources") if isinstance(container, dict) else None
                for section in ("requests", "limits"):
                    values = resources.get(section) if isinstance(resources, dict) else None
                    names.update(values if isinstance(values, dict) else ())
    return accelerators.unknown_resources(names) if names else []


def file_context(obj: dict | None, default_namespace: str | None,
                 namespace_labels: dict[str, str] | None = None,
                 lookup: Callable[[str, str, str | None, str], dict | None] | None = None) -> RequestContext:
    """How a manifest would reach the webhook: a CREATE in its namespace (or the default one)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    if not isinstance(namespace, str) or not namespace:
        namespace = default_namespace
    return RequestContext(operation="CREATE", namespace=namespace,
                          namespace_labels=dict(namespace_labels or {}), read_object=lookup,
                          list_objects=getattr(lookup, "list_objects", None))  # the namespace's ResourceQuotas


def _counter() -> dict[str, int]:
    return {"deny": 0, "warn": 0, "audit": 0, "mutate": 0}


class Tally:
    """The summary's counts, added to one item at a time, so that an audit of 100,000 manifests keeps
    counters rather than 100,000 decisions.  ``policy_ids`` grows in the order ids are first met."""

    def __init__(self, catalog_ids: Iterable[str] = ()) -> None:
        self.objects = self.workloads = self.allowed = self.denied = self.mutated = self.clean = 0
        self.skipped = self.input_errors = self.engine_errors = 0
        self.warned = 0  # workloads whose worst finding is a warning or an audit finding
        self.violations = {v: 0 for v in VERDICTS}
        self.by_policy: dict[str, dict[str, int]] = {pid: _counter() for pid in catalog_ids}
        self.by_namespace: dict[str, dict[str, int]] = {}
        self.verdicts_found: set[str] = set()  # violation verdicts of any workload (for the exit code)
        self.any_denied = False
        self.costs = cost.CostTotals()

    @property
    def policy_ids(self) -> list[str]:
        return list(self.by_policy)

    @property
    def errors(self) -> int:
        return self.input_errors + self.engine_errors

    def add(self, item: AuditItem) -> None:
        if item.decision is not None or item.engine_error:
            self.objects += 1
        if item.is_input_error:
            self.input_errors += 1
        elif item.error:
            self.engine_errors += 1
        elif item.verdict == "skipped":
            self.skipped += 1
        if item.is_workload:
            self._add_workload(item)

    def _add_workload(self, item: AuditItem) -> None:
        decision = item.decision
        assert decision is not None  # is_workload
        self.workloads += 1
        if decision.allowed:
            self.allowed += 1
        else:
            self.denied += 1
            self.any_denied = True
        if decision.patch:
            self.mutated += 1
        verdict = item.verdict
        if verdict == "pass":
            self.clean += 1
        elif verdict in ("warn", "audit"):
            self.warned += 1
        ns = self.by_namespace.setdefault(item.namespace_key, {"workloads": 0, **_counter()})
        ns["workloads"] += 1
        for v in decision.violations:
            counted = v.verdict if v.verdict in self.violations else "audit"
            self.violations[counted] += 1
            self.by_policy.setdefault(v.policy, _counter())[counted] += 1
            ns[counted] += 1
            self.verdicts_found.add(v.verdict)
        for pid in decision.mutated_by:
            self.by_policy.setdefault(pid, _counter())["mutate"] += 1
        if decision.mutated_by or decision.patch:
            ns["mutate"] += 1
        if item.cost is not None:
            self.costs.add(item.cost)


@dataclass
class AuditReport:
    """What every format needs besides the items: the counts, the policy catalog and the exit-code rule.

    The audit streams: it hands each item to ``count`` and to the format, and keeps none of them
    (``items`` stays empty).  Callers that do hold every item (tests, a few objects) pass them as
    ``items``: they are counted at once, and ``formats.render`` writes them.
    """

    items: list[AuditItem] = field(default_factory=list)
    fail_on: str = "deny"
    catalog: dict[str, PolicyInfo] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    extra_errors: list[str] = field(default_factory=list)  # e.g. kinds the cluster refused to list
    notes: list[str] = field(default_factory=list)  # degraded but complete, e.g. CRDs not installed
    tally: Tally = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.tally = Tally(self.catalog)
        for item in self.items:
            self.tally.add(item)

    def count(self, item: AuditItem) -> None:
        """Add one item to the counts without keeping it."""
        self.tally.add(item)

    @property
    def workloads(self) -> list[AuditItem]:
        """The kept items that are workloads (empty for a streamed audit)."""
        return [i for i in self.items if i.is_workload]

    def policy_ids(self) -> list[str]:
        """Registered policies in engine order, then any other id a decision mentioned so far."""
        return self.tally.policy_ids

    @property
    def exit_code(self) -> int:
        """2 for any input or engine error (the audit is incomplete: that wins), else 1 for
        findings at or above ``fail_on``, else 0.  Mutations are not findings."""
        if self.tally.errors or self.extra_errors:
            return ExitCode.USAGE
        failing = FAILING[self.fail_on]
        if self.tally.verdicts_found & failing or ("deny" in failing and self.tally.any_denied):
            return ExitCode.FINDINGS
        return ExitCode.OK

    def summary(self) -> dict[str, Any]:
        """The ``summary`` object of the JSON output (see docs/audit.md for each key)."""
        t = self.tally
        return {
            "sources": list(self.sources),
            "failOn": self.fail_on,
            "exitCode": self.exit_code,
            "objects": t.objects,
            "workloads": t.workloads,
            "allowed": t.allowed,
            "denied": t.denied,
            "mutated": t.mutated,
            "clean": t.clean,
            "skipped": t.skipped,
            "inputErrors": t.input_errors,
            "engineErrors": t.engine_errors,
            "otherErrors": list(self.extra_errors),
            "notes": list(self.notes),
            "violations": dict(t.violations),
            "byPolicy": {pid: dict(counts) for pid, counts in t.by_policy.items()},
            "byNamespace": {ns: dict(counts) for ns, counts in sorted(t.by_namespace.items())},
            "costAtRisk": t.costs.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON output of the kept items: ``{"summary": ..., "results": [...]}``."""
        return {"summary": self.summary(), "results": [item.entry() for item in self.items]}
