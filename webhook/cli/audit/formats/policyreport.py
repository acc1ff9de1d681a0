"""``--format policyreport``: wgpolicyk8s.io/v1alpha2 PolicyReports, the format Kyverno and others share.

One ``PolicyReport`` per namespace and one ``ClusterPolicyReport`` (objects without a
namespace, input errors) as a YAML stream, so ``kubectl apply -f`` can load them next to
Kyverno's reports and Policy Reporter or any dashboard reading that CRD shows gpuguard's
findings too.  One result per workload x policy, as Kyverno does:

- a deny finding is ``fail`` (severity high), warn is ``warn`` (medium), audit is ``warn``
  (low); gpuguard's own verdict is in ``properties.action``;
- a policy that would only change the workload is ``pass`` (the webhook fixes it) with
  ``properties.mutated: "true"`` and the changes in the message;
- no finding is ``pass``; an exempt workload is ``skip``; an unreadable input is ``error``.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

import yaml

from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport
from gpuguard.workloads.kinds import lookup

API_VERSION = "wgpolicyk8s.io/v1alpha2"
REPORT_NAME = "gpuguard-audit"
SOURCE = "gpuguard"
RESULTS = {"deny": ("fail", "high"), "warn": ("warn", "medium"), "audit": ("warn", "low")}
_RANK = {"fail": 3, "warn": 2, "error": 4, "skip": 1, "pass": 0}
MAX_MESSAGE = 1000


def _resource(item: AuditItem) -> dict[str, Any]:
    ref = {"apiVersion": item.api_version or "", "kind": item.kind or "", "name": item.name or ""}
    if item.namespace:
        ref["namespace"] = item.namespace
    return ref


def _result(policy: str, result: str, message: str, timestamp: dict[str, int], *, severity: str | None = None,
            category: str = "GPU workloads", resources: list[dict[str, Any]] | None = None,
            properties: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"source": SOURCE, "policy": policy, "rule": policy, "category": category,
                           "result": result, "scored": True, "timestamp": dict(timestamp),
                           "message": message[:MAX_MESSAGE]}
    if severity:
        out["severity"] = severity
    if resources:
        out["resources"] = resources
    if properties:
        out["properties"] = properties
    return out


def _workload_results(item: AuditItem, report: AuditReport, ts: dict[str, int]) -> list[dict[str, Any]]:
    where = {"source": item.doc.location}
    resources = [_resource(item)]
    if item.error:
        return [_result(SOURCE, "error", item.error, ts, resources=resources, properties=where)]
    if item.decision is not None and item.decision.skipped:
        if lookup(item.api_version, item.kind) is None:
            return []  # ConfigMaps, Services ...: nothing gpuguard has an opinion on
        return [_result(SOURCE, "skip", item.decision.skipped, ts, resources=resources, properties=where)]
    out = []
    changes = "; ".join(mutation.describe_changes(item.patch))
    for pid in report.policy_ids():
        info = report.catalog.get(pid)
        category = f"gpuguard {info.phase}" if info else "gpuguard"
        found = [v for v in item.violations if v.policy == pid]
        for v in found:
            result, severity = RESULTS.get(v.verdict, ("warn", "low"))
            out.append(_result(pid, result, v.text, ts, severity=severity, category=category, resources=resources,
                               properties={**where, "action": v.verdict, "path": v.path}))
        if found:
            continue
        if pid in item.mutated_by:
            out.append(_result(pid, "pass", f"gpuguard would change this workload on admission: {changes}", ts,
                               category=category, resources=resources, properties={**where, "mutated": "true"}))
        else:
            out.append(_result(pid, "pass", info.title if info else "no finding", ts, category=category,
                               resources=resources))
    return out


def _summary(results: list[dict[str, Any]]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    for result in results:
        counts[result["result"]] += 1
    return counts


def _report(kind: str, namespace: str | None, results: list[dict[str, Any]]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": REPORT_NAME,
                                "labels": {"app.kubernetes.io/managed-by": "gpuguard",
                                           "app.kubernetes.io/name": "gpuguard"}}
    if namespace:
        metadata["namespace"] = namespace
    results.sort(key=lambda r: (-_RANK[r["result"]], r["policy"]))
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "summary": _summary(results),
            "results": results}


def build(report: AuditReport, now: float | None = None) -> list[dict[str, Any]]:
    """The reports: a PolicyReport per namespace (sorted), then the ClusterPolicyReport."""
    ts = {"seconds": int(now if now is not None else time.time()), "nanos": 0}
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    cluster: list[dict[str, Any]] = []
    for item in report.items:
        if item.is_input_error:
            cluster.append(_result("invalid-input", "error", f"{item.doc.location}: {item.error}", ts,
                                   properties={"source": item.doc.location, "errorType": item.error_type or ""}))
            continue
        results = _workload_results(item, report, ts)
        if not results:
            continue
        if item.namespace:
            by_namespace.setdefault(item.namespace, []).extend(results)
        else:
            cluster.extend(results)
    for message in report.extra_errors:
        cluster.append(_result(SOURCE, "error", message, ts))
    reports = [_report("PolicyReport", ns, results) for ns, results in sorted(by_namespace.items())]
    if cluster or not reports:
        reports.append(_report("ClusterPolicyReport", None, cluster))
    return reports


class _Dumper(yaml.SafeDumper):
    """No ``&id001`` anchors: results share dicts, and consumers expect plain YAML."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(report: AuditReport, out: TextIO, options: RenderOptions) -> None:
    out.write(yaml.dump_all(build(report), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=120,
                            explicit_start=True))
