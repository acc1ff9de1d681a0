"""One workload's scan outcome as a ``wgpolicyk8s.io/v1alpha2`` PolicyReport (or ClusterPolicyReport).

One report per workload, owned by it (``ownerReferences``) and naming it in ``scope``, as Kyverno
writes its reports since 1.10: a report follows its subject (the garbage collector deletes it with
the workload, the scanner also deletes it on the watch's DELETE), one workload's update rewrites one
small object rather than a namespace-wide one, and no report can outgrow the API's object size limit
with the size of a namespace.  Policy Reporter and ``kubectl get polr`` read this shape.

Per result, as the audit's ``--format policyreport`` writes them:

- a ``deny`` finding is ``fail`` (severity high), ``warn`` is ``warn`` (medium), ``audit`` is ``warn``
  (low); gpuguard's own verdict is in ``properties.action``, the field in ``properties.path``;
- a mutating policy that would still change the stored workload is ``warn`` (low) with
  ``properties.mutated: "true"``: the workload is not in the shape admission gives (created before
  gpuguard, during an outage, or before the policy changed);
- every other policy is ``pass``; an exempt workload gets one ``skip``; a workload the engine could
  not judge one ``error`` saying why.

The builder is a pure function of its inputs: the same decision gives the same report, so the writer
compares ``digest`` (the content without timestamps) to decide whether anything must be written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpuguard.webhook.decision import NO_ACCELERATOR_CATEGORY, Decision, Violation, report_category
from gpuguard.webhook.reportapi import POLICY_REPORTS, ReportApi

API_VERSION = POLICY_REPORTS.api_version  # the default report API
SOURCE = "gpuguard"
NAME_PREFIX = "gpuguard-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuguard", "gpuguard.io/report": "scan"}
LABEL_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
# The subject's API group ("core" for the core group) and kind, as labels: a sweep leaves alone the
# reports of a kind the scan cannot list right now, and ``kubectl get polr -l`` can select by kind.
GROUP_LABEL, KIND_LABEL = "gpuguard.io/subject-group", "gpuguard.io/subject-kind"
DIGEST_ANNOTATION = "gpuguard.io/content-digest"
RESULTS = {"deny": ("fail", "high"), "warn": ("warn", "medium"), "audit": ("warn", "low")}
RESULT_VALUES = ("pass", "fail", "warn", "error", "skip")
_RANK = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "pass": 4}
MAX_MESSAGE = 1000
# A report far below etcd's 1.5 MiB request limit; past it, passes are dropped, then the tail of the
# findings (one result says how many were left out).
MAX_REPORT_BYTES = 512 * 1024
CPU_CATEGORY = NO_ACCELERATOR_CATEGORY


@dataclass(frozen=True)
class Subject:
    """The workload a report is about, as ``scope`` and the owner reference name it."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str

    @property
    def report_name(self) -> str:
        """The report's name: the subject's uid, unique across kinds and re-creations of a name."""
        return NAME_PREFIX + self.uid

    @property
    def group(self) -> str:
        return self.api_version.rsplit("/", 1)[0] if "/" in self.api_version else ""

    @property
    def report_kind(self) -> str:
        return "PolicyReport" if self.namespace else "ClusterPolicyReport"

    def ref(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}
        if self.namespace:
            ref["namespace"] = self.namespace
        return ref


@dataclass(frozen=True)
class Outcome:
    """What the scan learned of one workload: a decision, or why there is none."""

    subject: Subject
    decision: Decision | None = None
    error: str | None = None  # the engine raised, or could not read what the workload names
    policies: tuple[str, ...] = ()  # the policy ids a clean workload passes (engine order)
    changes: str = ""  # what the mutating policies would change together, in words
    titles: Mapping[str, str] = field(default_factory=dict)  # policy id -> what it does, for messages

    @property
    def accelerators(self) -> dict[str, int]:
        return self.decision.accelerators if self.decision is not None else {}

    @property
    def relevant(self) -> bool:
        """Worth a report: it holds accelerators, or gpuguard has something to say about it.

        CPU workloads with nothing found get none, so the number of reports follows the GPU
        workloads, not every Deployment of the cluster."""
        if self.error:
            return True
        decision = self.decision
        if decision is None:
            return False
        if decision.error:
            return True
        return bool(self.accelerators or decision.violations or decision.mutated_by)


@dataclass
class Built:
    """A report and the digest of its content (without timestamps)."""

    report: dict[str, Any]
    digest: str
    summary: dict[str, int] = field(default_factory=dict)


def _result(policy: str, result: str, message: str, ts: Mapping[str, int], category: str, subject: Subject, *,
            severity: str | None = None, properties: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"source": SOURCE, "policy": policy, "rule": policy, "category": category,
                           "result": result, "scored": True, "timestamp": dict(ts),
                           "message": message[:MAX_MESSAGE], "resources": [subject.ref()]}
    if severity:
        out["severity"] = severity
    if properties:
        out["properties"] = properties
    return out


def _finding(v: Violation, ts: Mapping[str, int], category: str, subject: Subject) -> dict[str, Any]:
    result, severity = RESULTS.get(v.verdict, ("warn", "low"))
    props = {"action": v.verdict, "path": v.path}
    if v.fix:
        props["fix"] = v.fix[:MAX_MESSAGE]
    return _result(v.policy, result, v.text, ts, category, subject, severity=severity, properties=props)


def results_of(outcome: Outcome, ts: Mapping[str, int]) -> list[dict[str, Any]]:
    """The report's ``results``: worst first, then by policy in engine order."""
    subject = outcome.subject
    category = report_category(outcome.decision)
    decision = outcome.decision
    error = outcome.error or (decision.error if decision is not None else None)
    if error or decision is None:
        return [_result(SOURCE, "error", error or "not evaluated", ts, category, subject, severity="high")]
    if decision.skipped:
        return [_result(SOURCE, "skip", decision.skipped, ts, category, subject)]
    out = [_finding(v, ts, category, subject) for v in decision.violations]
    flagged = {v.policy for v in decision.violations}
    for pid in decision.mutated_by:
        if pid not in flagged:
            flagged.add(pid)
            what = outcome.titles.get(pid, "the policy would change it")
            message = (f"[{pid}] not in the shape gpuguard gives on admission ({what}); re-apply the manifest "
                       "(the webhook completes it) or run gpuguard fix on it.")
            props = {"action": "mutate", "mutated": "true"}
            if outcome.changes:
                props["changes"] = outcome.changes[:MAX_MESSAGE]
            out.append(_result(pid, "warn", message, ts, category, subject, severity="low", properties=props))
    for pid in outcome.policies:
        if pid not in flagged:
            out.append(_result(pid, "pass", "no finding", ts, category, subject))
    order = {pid: i for i, pid in enumerate(outcome.policies)}
    out.sort(key=lambda r: (_RANK[r["result"]], order.get(r["policy"], len(order))))
    return out


def _summary(results: list[dict[str, Any]]) -> dict[str, int]:
    counts = dict.fromkeys(RESULT_VALUES, 0)
    for r in results:
        counts[r["result"]] += 1
    return counts


def _fit(results: list[dict[str, Any]], ts: Mapping[str, int], subject: Subject) -> list[dict[str, Any]]:
    """``results`` cut to ``MAX_REPORT_BYTES``: passes go first, then the last findings."""
    if len(orjson.dumps(results)) <= MAX_REPORT_BYTES:
        return results
    findings = [r for r in results if r["result"] != "pass"]
    dropped = len(results) - len(findings)
    size = 0
    kept: list[dict[str, Any]] = []
    for r in findings:
        size += len(orjson.dumps(r))
        if size > MAX_REPORT_BYTES - 4096:
            break
        kept.append(r)
    left_out = len(findings) - len(kept)
    note = (f"report cut to stay within the API's size limit: {dropped} passing results and "
            f"{left_out} findings left out; run gpuguard audit --cluster for the whole list")
    kept.append(_result(SOURCE, "error" if left_out else "skip", note, ts, kept[0]["category"] if kept else
                        CPU_CATEGORY, subject))
    return kept


def digest_of(report: Mapping[str, Any]) -> str:
    """A hash of what a report says (results and summary), timestamps left out: equal digest, no write."""
    results = [{k: v for k, v in r.items() if k != "timestamp"} for r in report.get("results") or []]
    body = orjson.dumps({"results": results, "summary": report.get("summary"), "scope": report.get("scope")},
                        option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(body).hexdigest()[:32]


def build(outcome: Outcome, now: float, api: ReportApi = POLICY_REPORTS) -> Built:
    """The report of one workload, evaluated at ``now`` (Unix seconds), in ``api`` (PolicyReports or OpenReports)."""
    subject = outcome.subject
    ts = {"seconds": int(now), "nanos": 0}
    results = _fit(results_of(outcome, ts), ts, subject)
    summary = _summary(results)
    metadata: dict[str, Any] = {
        "name": subject.report_name,
        "labels": {**MANAGED_BY, GROUP_LABEL: subject.group or "core", KIND_LABEL: subject.kind},
        "ownerReferences": [{"apiVersion": subject.api_version, "kind": subject.kind, "name": subject.name,
                             "uid": subject.uid}],
    }
    if subject.namespace:
        metadata["namespace"] = subject.namespace
    report: dict[str, Any] = {"apiVersion": api.api_version, "kind": api.kind_for(subject.namespace),
                              "metadata": metadata}
    if api.source_field:
        report["source"] = SOURCE
    report.update(scope=subject.ref(), summary=summary, results=results)
    digest = digest_of(report)
    metadata["annotations"] = {DIGEST_ANNOTATION: digest}
    return Built(report, digest, summary)
