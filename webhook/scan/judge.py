"""One stored workload through the engine, as the webhook would judge it on CREATE, into an ``Outcome``.

The stored object is first cleaned of what the server set (``audit --cluster`` does the same), so
it is judged as its author would submit it again; an exception costs this workload an ``error``
result, never the scan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuguard.webhook.catalog import load_catalog
from gpuguard.webhook.cli.audit import cost, mutation
from gpuguard.webhook.decision import NOT_FULLY_CHECKED, RequestContext, unresolved_as_finding
from gpuguard.webhook.engine import prechecks
from gpuguard.webhook.scan.report import Outcome, Subject

Evaluate = Callable[[dict, RequestContext], Any]
_ENGINE_CHECKS = frozenset({prechecks.POLICY_ID, NOT_FULLY_CHECKED})


def policy_ids(config: Any) -> tuple[str, ...]:
    """The policies a clean workload passes: every registered policy and custom rule, in engine order."""
    return tuple(pid for pid in load_catalog(config) if pid not in _ENGINE_CHECKS)


def policy_titles(config: Any) -> dict[str, str]:
    """Each policy's title, for the message of a mutation the stored workload lacks."""
    return {pid: info.title for pid, info in load_catalog(config).items()}


def judge(evaluate: Evaluate, obj: dict, ctx: RequestContext, subject: Subject,
          policies: tuple[str, ...], titles: Mapping[str, str] | None = None) -> Outcome:
    """The outcome of ``obj`` (already cleaned of server-set fields) in ``ctx``."""
    try:
        decision = unresolved_as_finding(evaluate(obj, ctx))
    except Exception as exc:  # a policy bug must not stop the scan of every other workload
        return Outcome(subject, error=f"the engine failed on this object: {type(exc).__name__}: {exc}",
                       policies=policies)
    changes = "; ".join(mutation.describe_changes(decision.patch)) if decision.patch else ""
    return Outcome(subject, decision=decision, policies=policies, changes=changes, titles=titles or {})


def at_risk(outcome: Outcome, prices: cost.Prices, finished: bool) -> cost.WorkloadCost | None:
    """GPU-hours and dollars a day this workload puts at risk (the audit's cost model); ``None``
    for finished workloads (their GPUs are released) and those not at risk."""
    decision = outcome.decision
    if decision is None or finished or decision.skipped or decision.error:
        return None
    return cost.workload_cost(decision, prices)
