"""The scan's reports against the wgpolicyk8s.io/v1alpha2 PolicyReport CRD schema, and what they say.

The schema is the CRD the e2e tests install (``tests/support/policyreport/crds.yaml``); here it is made
strict (no property the CRD does not declare), because the apiserver would silently prune such a field
and Policy Reporter would never see it.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest
import yaml

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import Decision, RequestContext, Violation
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.scan import report
from gpuguard.webhook.scan.judge import judge, policy_ids, policy_titles
from gpuguard.webhook.scan.report import MAX_REPORT_BYTES, Outcome, Subject
from tests.support.builders import bare_pod_spec, cpu_container, make, pvc_pod_spec
from tests.support.crd_schemas import crd_schemas
from tests.support.paths import REPO

NOW = 1_790_000_000.0


SCHEMAS = crd_schemas(REPO / "tests/support/policyreport/crds.yaml")
CONFIG = parse_config_text((REPO / "policies/default-config.yaml").read_text())
ENGINE = Engine(CONFIG)
POLICIES = policy_ids(CONFIG)
TITLES = policy_titles(CONFIG)


def _valid(built: dict) -> dict:
    schema = SCHEMAS[built["kind"]]
    jsonschema.validate(built, schema)
    # the metadata the apiserver needs, which the CRD schema leaves to ObjectMeta
    assert built["metadata"]["name"].startswith("gpuguard-") and len(built["metadata"]["name"]) <= 253
    return built


def _subject(obj: dict, uid: str = "0f7c-uid") -> Subject:
    meta = obj["metadata"]
    return Subject(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"], uid)


def _report_of(obj: dict, now: float = NOW) -> report.Built:
    ctx = RequestContext(operation="CREATE", namespace=obj["metadata"].get("namespace"))
    return report.build(judge(ENGINE.evaluate, obj, ctx, _subject(obj), POLICIES, TITLES), now)


def _by_policy(built: report.Built) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in built.report["results"]:
        out.setdefault(r["policy"], []).append(r)
    return out


def test_violating_job_fails_the_policies_that_deny_it_with_field_fix_and_subject() -> None:
    job = make("Job", bare_pod_spec(2), name="bert")  # no checkpoint volume
    built = _report_of(job)
    doc = _valid(built.report)
    assert doc["kind"] == "PolicyReport" and doc["metadata"]["namespace"] == "ml"
    assert doc["scope"] == {"apiVersion": "batch/v1", "kind": "Job", "name": "bert", "namespace": "ml",
                            "uid": "0f7c-uid"}
    assert doc["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "bert",
                                                   "uid": "0f7c-uid"}]
    assert doc["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuguard", "gpuguard.io/report": "scan",
                                         "gpuguard.io/subject-group": "batch", "gpuguard.io/subject-kind": "Job"}
    found = _by_policy(built)
    fail = found["checkpoint-volume"][0]
    assert fail["result"] == "fail" and fail["severity"] == "high" and fail["source"] == "gpuguard"
    assert fail["rule"] == "checkpoint-volume" and fail["category"] == "nvidia.com/gpu"
    assert fail["message"].startswith("[checkpoint-volume] spec.template.spec.containers[0] (trainer):")
    assert "persistentVolumeClaim" in fail["properties"]["fix"]
    assert fail["properties"]["path"] == "spec.template.spec.containers[0]"
    assert fail["resources"] == [doc["scope"]]
    assert fail["timestamp"] == {"seconds": int(NOW), "nanos": 0}
    assert doc["results"][0]["result"] == "fail"  # worst first
    assert doc["summary"]["fail"] == sum(1 for r in doc["results"] if r["result"] == "fail") >= 1
    assert doc["summary"]["pass"] == sum(1 for r in doc["results"] if r["result"] == "pass") > 0
    assert sum(doc["summary"].values()) == len(doc["results"])


def test_a_workload_in_admitted_shape_passes_every_policy() -> None:
    job = make("Job", pvc_pod_spec(1), name="ok")
    shaped = ENGINE.evaluate(job, RequestContext(operation="CREATE", namespace="ml")).mutated
    built = _report_of(copy.deepcopy(shaped))
    doc = _valid(built.report)
    assert {r["result"] for r in doc["results"]} == {"pass"}
    assert [r["policy"] for r in doc["results"]] == list(POLICIES)
    assert doc["summary"] == {"pass": len(POLICIES), "fail": 0, "warn": 0, "error": 0, "skip": 0}


def test_a_workload_the_webhook_never_shaped_warns_per_mutating_policy_with_the_changes() -> None:
    built = _report_of(make("Job", pvc_pod_spec(1), name="legacy"))  # created while gpuguard was down
    found = _by_policy(_valid(built.report) and built)
    ttl = found["job-ttl"][0]
    assert ttl["result"] == "warn" and ttl["severity"] == "low"
    assert ttl["properties"]["mutated"] == "true" and ttl["properties"]["action"] == "mutate"
    assert "ttlSecondsAfterFinished" in ttl["properties"]["changes"]
    assert ttl["message"].startswith("[job-ttl] not in the shape gpuguard gives on admission (Delete finished jobs")
    assert "gpuguard fix" in ttl["message"]
    assert found["checkpoint-volume"][0]["result"] == "pass"


def test_exempt_and_unjudgeable_workloads_get_one_skip_or_error() -> None:
    subject = Subject("batch/v1", "Job", "ml", "j", "u1")
    skipped = Decision(allowed=True, api_version="batch/v1", kind="Job", namespace="ml", name="j", original={},
                       mutated={}, skipped="namespace ml is exempt")
    doc = _valid(report.build(Outcome(subject, decision=skipped, policies=POLICIES), NOW).report)
    assert [(r["result"], r["message"]) for r in doc["results"]] == [("skip", "namespace ml is exempt")]
    crashed = Outcome(subject, error="the engine failed on this object: KeyError: 'x'", policies=POLICIES)
    doc = _valid(report.build(crashed, NOW).report)
    assert [r["result"] for r in doc["results"]] == ["error"] and doc["summary"]["error"] == 1


def test_cluster_scoped_subjects_get_a_cluster_policy_report() -> None:
    subject = Subject("example.io/v1", "GpuPool", None, "pool-a", "u2")
    doc = _valid(report.build(Outcome(subject, error="cannot judge"), NOW).report)
    assert doc["kind"] == "ClusterPolicyReport" and "namespace" not in doc["metadata"]
    assert "namespace" not in doc["scope"]


def test_digest_ignores_timestamps_and_follows_content() -> None:
    job = make("Job", bare_pod_spec(1), name="d")
    first, later = _report_of(job), _report_of(job, NOW + 3600)
    assert first.report["results"][0]["timestamp"] != later.report["results"][0]["timestamp"]
    assert first.digest == later.digest == report.digest_of(later.report)
    assert first.report["metadata"]["annotations"][report.DIGEST_ANNOTATION] == first.digest
    fixed = make("Job", pvc_pod_spec(1), name="d")
    assert _report_of(fixed).digest != first.digest


def test_cpu_workloads_without_findings_are_not_worth_a_report() -> None:
    deploy = make("Deployment", {"containers": [cpu_container()]}, name="web")
    ctx = RequestContext(namespace="ml")
    assert not judge(ENGINE.evaluate, deploy, ctx, _subject(deploy), POLICIES).relevant
    gpu = make("Deployment", bare_pod_spec(1), name="gpu")
    assert judge(ENGINE.evaluate, gpu, ctx, _subject(gpu), POLICIES).relevant


@pytest.mark.parametrize("count", [5_000])
def test_a_huge_report_is_cut_below_the_size_limit_keeping_the_worst_and_saying_so(count: int) -> None:
    subject = Subject("batch/v1", "Job", "ml", "big", "u3")
    violations = [Violation("checkpoint-volume", "deny", f"spec.x[{i}]", "m" * 300, "f" * 100)
                  for i in range(count)]
    decision = Decision(allowed=False, api_version="batch/v1", kind="Job", namespace="ml", name="big",
                        original={}, mutated={}, violations=violations, gpus=1)
    built = report.build(Outcome(subject, decision=decision, policies=POLICIES), NOW)
    doc = _valid(built.report)
    import orjson

    assert len(orjson.dumps(doc)) <= MAX_REPORT_BYTES
    assert doc["results"][0]["result"] == "fail"
    assert doc["results"][-1]["result"] == "error" and "left out" in doc["results"][-1]["message"]
    assert all(r["result"] != "pass" for r in doc["results"])


def test_the_audit_and_the_scan_give_a_workload_the_same_category(tmp_path) -> None:
    """`gpuguard audit -o policyreport` and the scan's reports group results alike (Policy Reporter's category):
    the accelerator resources the workload asks for, or "no accelerator"."""
    from gpuguard.webhook.catalog import load_catalog
    from gpuguard.webhook.cli.audit.cost import Prices
    from gpuguard.webhook.cli.audit.formats import policyreport
    from gpuguard.webhook.cli.audit.run import AuditReport, evaluate_all, file_context
    from gpuguard.webhook.manifests import load

    gpu = make("Job", bare_pod_spec(2), name="bert")
    cpu = make("Job", {"restartPolicy": "Never", "containers": [cpu_container()]}, name="etl")
    (tmp_path / "jobs.yaml").write_text(yaml.safe_dump_all([gpu, cpu]))
    pairs = ((doc, file_context(doc.obj, "ml")) for doc in load([str(tmp_path / "jobs.yaml")]))
    items = list(evaluate_all(pairs, ENGINE.evaluate, Prices.from_config(CONFIG)))
    audited = policyreport.build(AuditReport(items, catalog=load_catalog(CONFIG)), now=NOW)
    by_name = {}
    for doc in audited:
        for result in doc["results"]:
            by_name.setdefault(result["resources"][0]["name"], set()).add(result["category"])
    assert by_name["bert"] == {"nvidia.com/gpu"}
    assert by_name["bert"] == {r["category"] for r in _report_of(gpu).report["results"]}
    assert by_name["etl"] == {report.CPU_CATEGORY} == {"no accelerator"}


def test_the_scan_writes_openreports_with_the_same_results_when_asked() -> None:
    """``gpuguard scan --report-api openreports``: Report/ClusterReport in openreports.io/v1alpha1, valid against
    CRDs written from the API's field list, saying what the PolicyReport says (same digest, same results)."""
    from gpuguard.webhook.reportapi import OPEN_REPORTS
    from gpuguard.webhook.scan.writer import Writer

    schemas = crd_schemas(REPO / "tests/support/openreports/crds.yaml")
    job = make("Job", bare_pod_spec(2), name="bert")
    ctx = RequestContext(operation="CREATE", namespace="ml")
    outcome = judge(ENGINE.evaluate, job, ctx, _subject(job), POLICIES, TITLES)
    polr, opened = report.build(outcome, NOW), report.build(outcome, NOW, OPEN_REPORTS)
    doc = opened.report
    jsonschema.validate(doc, schemas[doc["kind"]])
    assert (doc["apiVersion"], doc["kind"], doc["source"]) == ("openreports.io/v1alpha1", "Report", "gpuguard")
    assert doc["results"] == polr.report["results"] and opened.digest == polr.digest
    assert doc["metadata"]["labels"] == polr.report["metadata"]["labels"]  # the sweep and restore select by them
    cluster = report.build(judge(ENGINE.evaluate, job, ctx, Subject("batch/v1", "Job", None, "x", "u"),
                                 POLICIES, TITLES), NOW, OPEN_REPORTS).report
    assert cluster["kind"] == "ClusterReport" and "namespace" not in cluster["metadata"]
    jsonschema.validate(cluster, schemas["ClusterReport"])
    writer = Writer(None, report_api=OPEN_REPORTS)
    assert writer._path("ml", "gpuguard-u") == "/apis/openreports.io/v1alpha1/namespaces/ml/reports/gpuguard-u"
    assert writer._path("", "gpuguard-u") == "/apis/openreports.io/v1alpha1/clusterreports/gpuguard-u"
