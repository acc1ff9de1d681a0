"""``--format policyreport``: wgpolicyk8s.io/v1alpha2 PolicyReports, the format Kyverno and others share.

One ``PolicyReport`` per namespace and one ``ClusterPolicyReport`` (objects without a
namespace, input errors) as a YAML stream, so ``kubectl apply -f`` can load them next to
Kyverno's reports and Policy Reporter or any dashboard reading that CRD shows gpuguard's
findings too.  One result per workload x policy, as Kyverno does:

- a deny finding is ``fail`` (severity high), warn is ``warn`` (medium), audit is ``warn``
  (low); gpuguard's own verdict is in ``properties.action``;
- a policy that would only change the workload is ``pass`` (the webhook fixes it) with
  ``properties.mutated: "true"`` and the changes in the message;
- no finding is ``pass``; an exempt workload is ``skip``; an unreadable input is ``error``;
- ``category`` is the accelerator resources the workload asks for (``nvidia.com/gpu``, or ``no accelerator``),
  as in the scan's reports: ``report_category``, one function for both.
"""

from __future__ import annotations

import io
import time
from typing import Any, TextIO

import yaml

from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.cli.audit.formats import RenderOptions, write_all
from gpuguard.webhook.cli.audit.formats.spool import Spool
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport
from gpuguard.webhook.decision import NO_ACCELERATOR_CATEGORY, report_category
from gpuguard.webhook.manifests import plain_yaml
from gpuguard.webhook.reportapi import POLICY_REPORTS, ReportApi
from gpuguard.workloads.kinds import lookup

API_VERSION = POLICY_REPORTS.api_version
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
            category: str = NO_ACCELERATOR_CATEGORY, resources: list[dict[str, Any]] | None = None,
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
    category = report_category(item.decision)
    if item.error:
        return [_result(SOURCE, "error", item.error, ts, category=category, resources=resources, properties=where)]
    if item.decision is not None and item.decision.skipped:
        if lookup(item.api_version, item.kind) is None:
            return []  # ConfigMaps, Services ...: nothing gpuguard has an opinion on
        return [_result(SOURCE, "skip", item.decision.skipped, ts, category=category, resources=resources,
                        properties=where)]
    out = []
    changes = "; ".join(mutation.describe_changes(item.patch))
    for pid in report.policy_ids():
        info = report.catalog.get(pid)
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


def _header(api: ReportApi, kind: str, namespace: str | None, summary: dict[str, int]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": REPORT_NAME,
                                "labels": {"app.kubernetes.io/managed-by": "gpuguard",
                                           "app.kubernetes.io/name": "gpuguard"}}
    if namespace:
        metadata["namespace"] = namespace
    head: dict[str, Any] = {"apiVersion": api.api_version, "kind": kind, "metadata": metadata}
    if api.source_field:
        head["source"] = SOURCE
    return {**head, "summary": summary, "results": []}


def _dump(value: Any, **kwargs: Any) -> str:
    """Plain YAML (results share dicts; consumers expect no anchors)."""
    return plain_yaml(value, default_flow_style=False, width=120, **kwargs)


def _items(results: list[dict[str, Any]]) -> list[str]:
    """Each result as the text it has as an item of a report's ``results:`` (a block sequence at column 0:
    every line of an item but its first is indented, so the items are cut where a line starts with ``- ``)."""
    items: list[str] = []
    for line in _dump(results).splitlines(keepends=True):
        if line.startswith("- ") or not items:
            items.append(line)
        else:
            items[-1] += line
    return items


class Writer:
    """Results are dumped to YAML as each object is decided and parked on disk by (result, policy) and
    namespace, which is the order of a report's ``results``: worst result first, then by policy, then in
    input order.  One report per namespace is written at the end, its ``summary`` counts first."""

    API = POLICY_REPORTS

    def __init__(self, report: AuditReport, out: TextIO, options: RenderOptions, now: float | None = None) -> None:
        self.report, self.out = report, out
        self.ts = {"seconds": int(now if now is not None else time.time()), "nanos": 0}
        self.buckets: dict[tuple[int, str], Spool] = {}  # (-rank, policy) -> text by namespace (None: cluster)
        self.counts: dict[str | None, dict[str, int]] = {}

    def _add(self, namespace: str | None, results: list[dict[str, Any]]) -> None:
        if not results:
            return
        counts = self.counts.setdefault(namespace, {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0})
        for result, text in zip(results, _items(results), strict=True):
            counts[result["result"]] += 1
            key = (-_RANK[result["result"]], result["policy"])
            spool = self.buckets.get(key)
            if spool is None:
                spool = self.buckets[key] = Spool()
            spool.write(namespace, text)

    def add(self, item: AuditItem) -> None:
        if item.is_input_error:
            self._add(None, [_result("invalid-input", "error", f"{item.doc.location}: {item.error}", self.ts,
                                     properties={"source": item.doc.location, "errorType": item.error_type or ""})])
            return
        self._add(item.namespace or None, _workload_results(item, self.report, self.ts))

    def finish(self) -> None:
        self._add(None, [_result(SOURCE, "error", message, self.ts) for message in self.report.extra_errors])
        namespaces = sorted(ns for ns in self.counts if ns is not None)
        reports: list[tuple[str, str | None]] = [(self.API.kind, ns) for ns in namespaces]
        if None in self.counts or not reports:
            reports.append((self.API.cluster_kind, None))
        order = sorted(self.buckets)
        for kind, namespace in reports:
            counts = self.counts.get(namespace, {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0})
            head = _dump(_header(self.API, kind, namespace, counts), explicit_start=True)
            if not any(counts.values()):
                self.out.write(head)
                continue
            self.out.write(head[: -len(" []\n")] + "\n")
            for key in order:
                self.buckets[key].copy(namespace, self.out)

    def close(self) -> None:
        for spool in self.buckets.values():
            spool.close()


def build(report: AuditReport, now: float | None = None, writer: type[Writer] | None = None) -> list[dict[str, Any]]:
    """The reports of ``report``'s items: a PolicyReport per namespace (sorted), then the ClusterPolicyReport
    (for tests: the text the writer writes, parsed; ``writer``: another report API's writer)."""
    out = io.StringIO()
    write_all((writer or Writer)(report, out, RenderOptions(), now=now), report.items)
    return [doc for doc in yaml.safe_load_all(out.getvalue()) if doc is not None]
