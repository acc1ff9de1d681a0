"""Prometheus metrics of ``gpuguard scan``, for alerting and chargeback.

The findings gauges describe the cluster as the last pass saw it and are exported by the replica
holding the lease only (the others export zero series for them), so ``sum()`` over replicas never
counts twice.  Label values are bounded: ``policy`` is a policy id, ``result`` one of the five
PolicyReport results, ``namespace`` a namespace of the cluster, ``resource`` an accelerator resource
name, ``class`` a workload class.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge, Histogram

FINDINGS = Gauge("gpuguard_scan_findings", "PolicyReport results of the tracked workloads, by policy, namespace and "
                 "result (pass|fail|warn|error|skip).", ["policy", "namespace", "result"])
AT_RISK_GPU_HOURS = Gauge("gpuguard_scan_gpu_hours_at_risk_per_day", "GPU-hours a day held by workloads at risk "
                          "(no deadline, no TTL, or never schedulable): the audit's cost model.", ["namespace"])
AT_RISK_USD = Gauge("gpuguard_scan_usd_at_risk_per_day", "The same GPU-hours priced with the config's cost table.",
                    ["namespace"])
ACCELERATORS = Gauge("gpuguard_scan_accelerators", "Accelerators the tracked, unfinished workloads ask for, by "
                     "namespace, resource name and workload class.", ["namespace", "resource", "class"])
WORKLOADS = Gauge("gpuguard_scan_workloads", "Workloads tracked (objects users write; those a listed controller "
                  "made are counted in their owner).")
REPORTS = Gauge("gpuguard_scan_reports", "PolicyReports and ClusterPolicyReports the scan keeps.")
PENDING = Gauge("gpuguard_scan_pending", "Workloads waiting for a new decision (changed or deleted).")
REPORTS_SERVED = Gauge("gpuguard_scan_report_api_served", "1 when the cluster serves wgpolicyk8s.io/v1alpha2 "
                       "PolicyReports; 0: the CRDs are not installed, the scan exports metrics only.")
WATCH_FAILING = Gauge("gpuguard_scan_watch_failing", "1 while the list or watch of a resource fails (e.g. RBAC "
                      "lacks a rule): its workloads are not judged.", ["resource"])
LEADER = Gauge("gpuguard_scan_leader", "1 while this replica holds the lease and writes reports.")
LAG = Gauge("gpuguard_scan_lag_seconds", "Time from the oldest change the last batch handled (a workload, its "
            "namespace or runtime, or a full pass asked for) to its report written.")
PASS_DURATION = Histogram("gpuguard_scan_pass_duration_seconds", "Time to re-evaluate and write one batch of "
                          "changed workloads (a full pass on start, config or inventory change and resync).",
                          ["kind"], buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
FULL_PASSES = Counter("gpuguard_scan_full_passes_total", "Full passes over every tracked workload.")
WRITES = Counter("gpuguard_scan_report_writes_total", "Report writes by operation (create|update|delete); "
                 "unchanged reports are not written.", ["operation"])
REPORTS_RESTORED = Counter("gpuguard_scan_reports_restored_total", "Reports someone else edited or deleted, written "
                           "back by the scan (each one is a change to gpuguard's verdicts that RBAC let through).")
READ_AGAIN = Counter("gpuguard_scan_workloads_read_again_total", "Workloads larger than the scan keeps (64 KiB "
                     "of cleaned JSON: it keeps their digest) read again from the apiserver to be judged.")
WRITE_RETRIES = Counter("gpuguard_scan_report_write_retries_total", "Report writes tried again after a passing "
                        "failure (5xx, 429, conflict, timeout), each 1 s doubling to at most 60 s after the last.")
RETRIES_PENDING = Gauge("gpuguard_scan_report_writes_pending_retry", "Reports whose last write failed and waits "
                        "to be tried again; staying above 0 means the apiserver keeps refusing them.")
API_REQUESTS = Gauge("gpuguard_scan_api_requests", "API requests made since start, by verb (get, post, put, "
                     "delete, watch): the scan's load on the apiserver.", ["verb"])
CONFIG_RELOADS = Counter("gpuguard_scan_config_reloads_total", "Config reloads; error keeps the old config.",
                         ["result"])
for _op in ("create", "update", "delete"):
    WRITES.labels(operation=_op)
for _r in ("success", "error"):
    CONFIG_RELOADS.labels(result=_r)


@dataclass
class Facts:
    """What one workload adds to the gauges."""

    namespace: str
    results: dict[tuple[str, str], int] = field(default_factory=dict)  # (policy, result) -> count
    gpu_hours: float = 0.0
    usd: float = 0.0
    accelerators: dict[tuple[str, str], int] = field(default_factory=dict)  # (resource, class) -> count


def publish(facts: Iterable[Facts], leading: bool) -> None:
    """Set the cluster gauges from every workload's facts (cleared on a stand-by)."""
    for gauge in (FINDINGS, AT_RISK_GPU_HOURS, AT_RISK_USD, ACCELERATORS):
        gauge.clear()
    if not leading:
        return
    findings: dict[tuple[str, str, str], int] = {}
    hours: dict[str, float] = {}
    usd: dict[str, float] = {}
    accelerators: dict[tuple[str, str, str], int] = {}
    for f in facts:
        for (policy, result), n in f.results.items():
            findings[(policy, f.namespace, result)] = findings.get((policy, f.namespace, result), 0) + n
        if f.gpu_hours:
            hours[f.namespace] = hours.get(f.namespace, 0.0) + f.gpu_hours
            usd[f.namespace] = usd.get(f.namespace, 0.0) + f.usd
        for (resource, cls), n in f.accelerators.items():
            accelerators[(f.namespace, resource, cls)] = accelerators.get((f.namespace, resource, cls), 0) + n
    for labels, n in findings.items():
        FINDINGS.labels(*labels).set(n)
    for ns, h in hours.items():
        AT_RISK_GPU_HOURS.labels(ns).set(h)
        AT_RISK_USD.labels(ns).set(round(usd[ns], 2))
    for labels, n in accelerators.items():
        ACCELERATORS.labels(*labels).set(n)
