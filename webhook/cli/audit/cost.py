"""Cost at risk: what the findings could cost per day, so an admin can weigh them in dollars.

This is an estimate, on purpose a simple and explainable one.  A workload is *at risk* when

- ``job-limits`` would have to set or cap its deadline (or flags it in warn/audit mode): it has no
  deadline, so a hung run keeps its GPUs until someone notices (a retry limit alone is no such risk);
- ``job-ttl`` would have to mutate it: it has no TTL (or one above the cap), so a finished
  job keeps its pods, claims and, for RayJob, a whole GPU cluster around;
- ``gpu-request-shape`` denies it: its pods can never be scheduled, while quota, autoscaled
  nodes and the already-started members of a partial gang sit idle;
- ``server-parallelism`` finds devices its model server's parallelism leaves unused: only those
  devices count (``Violation.idle``), for as long as the server runs.

Each at-risk workload is assumed to hold all its GPUs around the clock (24 GPU-hours per GPU
per day), or its idle devices alone where that is the only reason: an upper bound, not a
forecast.  Prices come from the config's ``cost`` section (``gpuguard.webhook.config.Cost``,
whose defaults are public on-demand list prices, shown in
``docs/audit.md``):
``productHourlyUsd`` by GPU product node-label value (or glob) when the workload pins a
product with a nodeSelector or required node affinity, else ``gpuHourlyUsd`` by resource
name (or glob).  Spot discounts and actual run times are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguard.workloads.kinds import lookup
from gpuguard.workloads.paths import get_path
from gpuguard.workloads.prices import Prices as BasePrices
from gpuguard.workloads.prices import pinned_products as products_in

if TYPE_CHECKING:
    from gpuguard.webhook.config import Cost
    from gpuguard.webhook.decision import Decision

HOURS_PER_DAY = 24

# policy id -> (what the finding means for cost, which verdicts count; None = mutation or any finding)
RISK_POLICIES: dict[str, tuple[str, frozenset[str] | None]] = {
    "job-limits": ("no deadline: a hung run holds its GPUs", None),
    "job-ttl": ("no TTL: a finished workload lingers", None),
    "gpu-request-shape": ("would pend forever", frozenset({"deny"})),
    "server-parallelism": ("idle devices: the server's parallelism leaves them unused", None),
}
# Reasons that put only the devices a finding names at risk (``Violation.idle``), not the whole workload's.
IDLE_ONLY = frozenset({"server-parallelism"})

METHOD = (
    "Estimate, not a bill: every workload job-limits or job-ttl would give a deadline or a TTL (it has none) "
    "or that gpu-request-shape denies (would pend forever) is assumed to hold all its GPUs 24 hours a "
    "day, and the devices server-parallelism finds idle are counted alone; GPU-hours x the configured "
    "price per GPU-hour (by GPU product label when the workload pins one, else by resource name). Spot "
    "discounts and real run times are not modelled."
)


def _default_cost() -> Cost:
    """The config schema's default prices (imported here: the schema loads pydantic)."""
    from gpuguard.webhook.config import Cost

    return Cost()


@dataclass(frozen=True)
class Prices(BasePrices):
    """The price table with the config schema's defaults (``Cost``) where none is given."""

    gpu_hourly_usd: Mapping[str, float] = field(default_factory=lambda: _default_cost().gpu_hourly_usd)
    product_hourly_usd: Mapping[str, float] = field(default_factory=lambda: _default_cost().product_hourly_usd)

    @classmethod
    def from_config(cls, config: Any) -> Prices:
        """The config's ``cost`` section (its defaults, ``gpuguard.webhook.config.Cost``, where the file has none)."""
        from gpuguard.webhook.config import Cost

        cost = getattr(config, "cost", None)
        cost = cost if isinstance(cost, Cost) else Cost()
        return cls(dict(cost.gpu_hourly_usd), dict(cost.product_hourly_usd))


def gpus_by_resource(decision: Decision) -> dict[str, int]:
    """GPU counts per resource name for the whole workload.

    Uses ``Decision.gpus_by_resource`` when the engine provides it; otherwise counts all of
    ``Decision.gpus`` as ``nvidia.com/gpu``, the common case.
    """
    by_resource = getattr(decision, "gpus_by_resource", None)
    if isinstance(by_resource, dict):
        return {str(k): int(v) for k, v in by_resource.items() if v}
    return {"nvidia.com/gpu": decision.gpus} if decision.gpus else {}


def pinned_products(obj: Any) -> list[str]:
    """GPU product label values a workload's pod templates require (nodeSelector or affinity)."""
    spec = lookup(get_path(obj, ("apiVersion",)), get_path(obj, ("kind",)))
    if spec is None or not isinstance(obj, dict):
        return []
    found: list[str] = []
    for ref in spec.locate(obj):
        pod = get_path(obj, ref.spec_path)
        if not isinstance(pod, dict):
            continue
        found.extend(products_in(pod))
    return list(dict.fromkeys(found))


def risk_reasons(decision: Decision) -> list[str]:
    """Ids of the policies whose finding puts this workload's GPUs at risk (see module doc)."""
    reasons = []
    for policy, (_, verdicts) in RISK_POLICIES.items():
        mutates = verdicts is None and policy in decision.mutated_by and (
            policy != "job-limits" or not _deadline_kept(decision))
        flagged = any(v.policy == policy and (verdicts is None or v.verdict in verdicts)
                      and (policy not in IDLE_ONLY or v.idle) for v in decision.violations)
        if mutates or flagged:
            reasons.append(policy)
    return reasons


def _deadline_kept(decision: Decision) -> bool:
    """Whether job-limits left the deadline as the user wrote it (it only set ``backoffLimit``): a run with its
    own deadline is not one a hang keeps running, whatever else job-limits added."""
    original, mutated = decision.original, decision.mutated
    if not isinstance(original, dict) or not isinstance(mutated, dict):
        return False
    kind = lookup(original.get("apiVersion"), original.get("kind"))
    path = kind.job.deadline if kind is not None and kind.job is not None else None
    if path is None:
        return False
    before = get_path(original, path)
    return before is not None and before == get_path(mutated, path)


def idle_devices(decision: Decision) -> dict[str, int]:
    """The devices the findings say sit idle, by resource (``Violation.idle``)."""
    out: dict[str, int] = {}
    for violation in decision.violations:
        if violation.policy in IDLE_ONLY:
            for resource, count in violation.idle:
                out[resource] = out.get(resource, 0) + count
    return out


_DONE_CONDITIONS = frozenset({"Complete", "Completed", "Succeeded", "Failed"})
_DONE_PHASES = frozenset({"Succeeded", "Failed", "Completed", "Complete", "Terminated", "Aborted"})


def is_finished(obj: Any) -> bool:
    """Whether a live workload's status says it ran to its end (so its GPUs are released).

    The operators share the vocabulary: a true ``Complete``/``Succeeded``/``Failed`` condition (Job,
    Kubeflow jobs, JobSet's ``Completed``, TrainJob), a final ``status.phase`` (Pod), RayJob's
    ``jobDeploymentStatus`` and Volcano's ``state.phase``.
    """
    status = obj.get("status") if isinstance(obj, dict) else None
    if not isinstance(status, dict):
        return False
    conditions = status.get("conditions")
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, dict) and isinstance(cond.get("type"), str) and cond["type"] in _DONE_CONDITIONS \
                and cond.get("status") == "True":
            return True
    state = status.get("state") if isinstance(status.get("state"), dict) else {}
    return any(isinstance(value, str) and value in _DONE_PHASES
               for value in (status.get("phase"), status.get("jobDeploymentStatus"), state.get("phase")))


@dataclass(frozen=True)
class WorkloadCost:
    """What one at-risk workload could cost per day."""

    reasons: tuple[str, ...]
    gpus: int
    gpu_hours_per_day: float
    usd_per_day: float
    unpriced: dict[str, int]

    def headline(self, money: Callable[[float], str]) -> str:
        """"cost at risk ≈ $576/day", saying which devices have no price rather than counting them as free."""
        if not self.unpriced:
            return f"cost at risk ≈ {money(self.usd_per_day)}/day"
        names = ", ".join(sorted(self.unpriced))
        if not self.usd_per_day:
            return f"cost at risk: not priced (no price for {names} in the config's prices)"
        return f"cost at risk ≈ {money(self.usd_per_day)}/day and unpriced {names}"

    def to_dict(self) -> dict[str, Any]:
        return {"reasons": list(self.reasons), "gpus": self.gpus, "gpuHoursPerDay": self.gpu_hours_per_day,
                "usdPerDay": round(self.usd_per_day, 2), "unpricedGpus": dict(self.unpriced)}


def workload_cost(decision: Decision, prices: Prices) -> WorkloadCost | None:
    """The cost at risk of one decision, or ``None`` when it is not at risk or uses no GPU."""
    reasons = risk_reasons(decision)
    whole = any(reason not in IDLE_ONLY for reason in reasons)
    counts = gpus_by_resource(decision) if whole else idle_devices(decision)
    if not reasons or not counts:
        return None
    obj = decision.mutated if isinstance(decision.mutated, dict) else decision.original
    products = pinned_products(obj)
    usd = 0.0
    unpriced: dict[str, int] = {}
    for resource, count in counts.items():
        price = prices.per_gpu_hour(resource, products)
        if price is None:
            unpriced[resource] = count
        else:
            usd += count * HOURS_PER_DAY * price
    gpus = sum(counts.values())
    return WorkloadCost(tuple(reasons), gpus, float(gpus * HOURS_PER_DAY), usd, unpriced)


class CostTotals:
    """The ``summary.costAtRisk`` object, added up one workload at a time: an audit keeps no list of costs."""

    def __init__(self) -> None:
        self.workloads = 0
        self.gpus = 0
        self.gpu_hours = 0.0
        self.usd: float = 0  # an int until a cost is added: round(0, 2) is written as 0, as before
        self.by_reason: dict[str, dict[str, Any]] = {}
        self.unpriced: dict[str, int] = {}

    def add(self, cost: WorkloadCost) -> None:
        self.workloads += 1
        self.gpus += cost.gpus
        self.gpu_hours += cost.gpu_hours_per_day
        self.usd += cost.usd_per_day
        for reason in cost.reasons:
            bucket = self.by_reason.setdefault(reason, {"description": RISK_POLICIES[reason][0], "workloads": 0,
                                                        "gpuHoursPerDay": 0.0, "usdPerDay": 0.0})
            bucket["workloads"] += 1
            bucket["gpuHoursPerDay"] += cost.gpu_hours_per_day
            bucket["usdPerDay"] = round(bucket["usdPerDay"] + cost.usd_per_day, 2)
        for resource, count in cost.unpriced.items():
            self.unpriced[resource] = self.unpriced.get(resource, 0) + count

    def to_dict(self) -> dict[str, Any]:
        return {
            "estimate": True,
            "currency": "USD",
            "hoursPerDay": HOURS_PER_DAY,
            "workloads": self.workloads,
            "gpus": self.gpus,
            "gpuHoursPerDay": float(self.gpu_hours),
            "usdPerDay": round(self.usd, 2),
            "byReason": {reason: dict(bucket) for reason, bucket in self.by_reason.items()},
            "unpricedGpus": dict(self.unpriced),
            "method": METHOD,
        }


def summarize(costs: Iterable[WorkloadCost]) -> dict[str, Any]:
    """The ``summary.costAtRisk`` object of the JSON output."""
    totals = CostTotals()
    for cost in costs:
        totals.add(cost)
    return totals.to_dict()
