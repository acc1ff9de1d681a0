"""Every audit format, produced from the fixture manifests by the real engine and parsed back.

The fixture set (tests/fixtures/manifests) holds real-looking ML workloads and broken inputs,
so each test also proves the broken ones are reported while the rest is still audited.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import yaml

from gpuguard.webhook.catalog import load_catalog
from gpuguard.webhook.cli.audit.cost import Prices
from gpuguard.webhook.cli.audit.formats import FORMATS, RenderOptions, htmlreport, junit, policyreport, render, sarif
from gpuguard.webhook.cli.audit.run import AuditReport, evaluate_all, file_context
from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.manifests import load
from tests.support.paths import REPO

ROOT = REPO
MANIFESTS = ROOT / "tests" / "fixtures" / "manifests"
RESULT_SCHEMA = ROOT / "docs" / "audit-result.schema.json"
SARIF_SCHEMA = ROOT / "tests" / "fixtures" / "sarif" / "sarif-2.1.0-trimmed.schema.json"


def make_report(paths: list[str], fail_on: str = "deny") -> AuditReport:
    # Inference granted everywhere, so the serving fixtures are judged as the inference they are.
    config = load_config(str(ROOT / "tests" / "fixtures" / "configs" / "serving-grants.yaml"))
    engine = Engine(config)
    pairs = ((doc, file_context(doc.obj, "default")) for doc in load(paths))
    items = list(evaluate_all(pairs, engine.evaluate, Prices.from_config(config)))
    return AuditReport(items, fail_on=fail_on, catalog=load_catalog(), sources=list(paths))


@pytest.fixture(scope="module")
def report(monkeypatch_module) -> AuditReport:
    return make_report([str(MANIFESTS.relative_to(ROOT))])


@pytest.fixture(scope="module")
def monkeypatch_module():
    """Run from the repo root so paths (and SARIF URIs) are relative, as in CI."""
    mp = pytest.MonkeyPatch()
    mp.chdir(ROOT)
    yield mp
    mp.undo()


def rendered(report: AuditReport, fmt: str, **options) -> str:
    out = io.StringIO()
    render(report, fmt, out, RenderOptions(**options))
    return out.getvalue()


def workload(report: AuditReport, kind: str, name: str):
    return next(i for i in report.items if i.kind == kind and i.name == name)


# ---------------------------------------------------------------------------------------------- the audit
def test_fixture_set_covers_the_ml_kinds_and_input_errors(report: AuditReport) -> None:
    kinds = Counter(i.kind for i in report.workloads)
    for kind in ("Job", "PyTorchJob", "JobSet", "RayJob", "Deployment", "Notebook", "Pod"):
        assert kinds[kind], kind
    errors = {(Path(i.doc.source).name, i.doc.line, i.error_type) for i in report.items if i.is_input_error}
    assert errors == {("broken-stream.yaml", 23, "invalid-yaml"), ("truncated.json", 5, "invalid-json"),
                      ("values.yaml", 2, "not-kubernetes")}
    # The documents around the broken one were still audited.
    assert workload(report, "Job", "before-the-break").is_workload
    assert workload(report, "Deployment", "after-the-break").is_workload
    assert report.exit_code == 2


def test_findings_the_fixtures_were_written_for(report: AuditReport) -> None:
    def policies(kind: str, name: str) -> set[tuple[str, str]]:
        return {(v.policy, v.verdict) for v in workload(report, kind, name).violations}

    assert ("checkpoint-volume", "deny") in policies("Job", "bert-large-pretrain")
    assert ("gang-scheduling", "deny") in policies("PyTorchJob", "resnet50-imagenet")
    assert ("inference-on-spot", "warn") in policies("Deployment", "mistral-7b-vllm")
    assert ("gpu-request-shape", "deny") in policies("Pod", "nccl-allreduce-test")
    bert = workload(report, "Job", "bert-large-pretrain")
    assert {"job-ttl", "job-limits"} <= set(bert.mutated_by)
    assert bert.cost is not None and bert.cost.gpus == 4
    # A Job with TTL, deadline, PVC checkpoints and resources is not at risk.
    assert workload(report, "Job", "llama3-8b-sft").cost is None


def test_kind_list_items_and_json_have_their_own_lines(report: AuditReport) -> None:
    whisper = workload(report, "Deployment", "whisper-asr")
    debug = workload(report, "Pod", "gpu-debug")
    assert (whisper.doc.item, whisper.doc.line) == (0, 7)
    assert (debug.doc.item, debug.doc.line) == (1, 29)
    assert workload(report, "Deployment", "triton-resnet").doc.line == 1


# ---------------------------------------------------------------------------------------------- json
def test_json_validates_against_the_published_schema(report: AuditReport) -> None:
    data = json.loads(rendered(report, "json"))
    schema = json.loads(RESULT_SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(data)
    summary = data["summary"]
    assert summary["exitCode"] == 2 and summary["inputErrors"] == 3
    assert summary["workloads"] == len([r for r in data["results"] if "allowed" in r and "skipped" not in r])
    assert summary["violations"]["deny"] == sum(
        1 for r in data["results"] for v in r.get("violations", []) if v["action"] == "deny")
    cost = summary["costAtRisk"]
    assert cost["estimate"] is True and cost["usdPerDay"] > 0 and "Estimate" in cost["method"]
    assert set(cost["byReason"]) == {"job-limits", "job-ttl", "gpu-request-shape"}
    assert cost["usdPerDay"] == pytest.approx(sum(r["costAtRisk"]["usdPerDay"] for r in data["results"]
                                                  if "costAtRisk" in r), abs=0.05)
    errors = [r for r in data["results"] if r.get("errorType") == "invalid-yaml"]
    assert errors[0]["line"] == 23 and errors[0]["source"].endswith("broken-stream.yaml")


def test_json_schema_rejects_a_broken_contract(report: AuditReport) -> None:
    data = json.loads(rendered(report, "json"))
    del data["results"][0]["allowed"]
    data["summary"]["failOn"] = "sometimes"
    schema = json.loads(RESULT_SCHEMA.read_text())
    assert len(list(jsonschema.Draft202012Validator(schema).iter_errors(data))) >= 2


# ---------------------------------------------------------------------------------------------- junit
def test_junit_has_one_case_per_workload_and_policy(report: AuditReport) -> None:
    root = ET.fromstring(rendered(report, "junit"))
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    policy_count = len(report.policy_ids())
    evaluated = [i for i in report.items if i.is_workload]
    errors = [i for i in report.items if i.error]
    assert len(cases) == len(evaluated) * policy_count + len(errors)
    assert int(root.get("tests")) == len(cases)
    failures = root.findall("./testsuite/testcase/failure")
    assert int(root.get("failures")) == len(failures)
    assert len(failures) == len({(i.label, v.policy) for i in evaluated for v in i.violations
                                 if v.verdict == "deny"})
    assert int(root.get("errors")) == 3
    for suite in root.findall("testsuite"):
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
    bert = [c for c in cases if c.get("name") == "Job ml-research/bert-large-pretrain :: checkpoint-volume"]
    assert bert and bert[0].find("failure").get("type") == "deny"
    assert "bert-pretrain-job.yaml:" in bert[0].find("failure").text


def test_junit_fail_on_warn_turns_warnings_into_failures() -> None:
    report = make_report([str(MANIFESTS / "inference")], fail_on="warn")
    root = junit.build(report)
    assert int(root.get("failures")) >= 1
    never = junit.build(make_report([str(MANIFESTS / "inference")], fail_on="never"))
    assert int(never.get("failures")) == 0
    assert "inference-on-spot" in ET.tostring(never, encoding="unicode")  # still shown, as system-out


# ---------------------------------------------------------------------------------------------- sarif
def test_sarif_is_valid_2_1_0_with_a_rule_per_policy(report: AuditReport) -> None:
    data = json.loads(rendered(report, "sarif"))
    jsonschema.Draft7Validator(json.loads(SARIF_SCHEMA.read_text())).validate(data)
    assert data["version"] == "2.1.0"
    run = data["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    rule_ids = [r["id"] for r in rules]
    assert set(load_catalog()) <= set(rule_ids) and len(rule_ids) == len(set(rule_ids))
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        physical = result["locations"][0]["physicalLocation"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert not physical["artifactLocation"]["uri"].startswith("/")
        assert physical["region"]["startLine"] >= 1
    assert run["invocations"][0]["executionSuccessful"] is False


def test_sarif_points_at_the_offending_field(report: AuditReport) -> None:
    results = sarif.build(report)["runs"][0]["results"]
    ckpt = next(r for r in results if r["ruleId"] == "checkpoint-volume"
                and "bert-large-pretrain" in r["message"]["text"])
    location = ckpt["locations"][0]
    assert location["physicalLocation"]["artifactLocation"]["uri"].endswith("training/bert-pretrain-job.yaml")
    lines = (MANIFESTS / "training" / "bert-pretrain-job.yaml").read_text().splitlines()
    assert lines[location["physicalLocation"]["region"]["startLine"] - 1].strip() == "- name: pretrain"
    assert location["logicalLocations"][0]["fullyQualifiedName"] == "Job/ml-research/bert-large-pretrain"
    broken = next(r for r in results if r["ruleId"] == "invalid-input" and "broken-stream" in
                  r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
    assert broken["locations"][0]["physicalLocation"]["region"]["startLine"] == 23
    assert broken["level"] == "error"


# ---------------------------------------------------------------------------------------------- policyreport
def test_policyreports_per_namespace_and_cluster(report: AuditReport) -> None:
    docs = list(yaml.safe_load_all(rendered(report, "policyreport")))
    namespaced = [d for d in docs if d["kind"] == "PolicyReport"]
    cluster = [d for d in docs if d["kind"] == "ClusterPolicyReport"]
    assert len(cluster) == 1 and "namespace" not in cluster[0]["metadata"]
    assert {d["metadata"]["namespace"] for d in namespaced} == {i.namespace for i in report.workloads}
    for doc in docs:
        assert doc["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        assert set(doc["summary"]) == {"pass", "fail", "warn", "error", "skip"}
        assert sum(doc["summary"].values()) == len(doc["results"])
        for result in doc["results"]:
            assert result["result"] in {"pass", "fail", "warn", "error", "skip"}
            assert result["source"] == "gpuguard" and result["policy"] and result["scored"] is True
            assert set(result["timestamp"]) == {"seconds", "nanos"}
            assert result.get("severity", "info") in {"critical", "high", "medium", "low", "info"}
            for ref in result.get("resources", []):
                assert {"apiVersion", "kind", "name"} <= set(ref)
                assert ref.get("namespace") == doc["metadata"].get("namespace")
    research = next(d for d in namespaced if d["metadata"]["namespace"] == "ml-research")
    fails = [r for r in research["results"] if r["result"] == "fail"]
    assert any(r["policy"] == "checkpoint-volume" and r["resources"][0]["name"] == "bert-large-pretrain"
               and r["severity"] == "high" for r in fails)
    assert cluster[0]["summary"]["error"] == 3


def test_policyreport_maps_mutations_to_pass_with_the_change() -> None:
    report = make_report([str(MANIFESTS / "training" / "jobset-gpt.yaml")])
    results = policyreport.build(report, now=0)[0]["results"]
    ttl = next(r for r in results if r["policy"] == "job-ttl")
    assert ttl["result"] == "pass" and ttl["properties"]["mutated"] == "true"
    assert "ttlSecondsAfterFinished" in ttl["message"]


@pytest.mark.parametrize(("fmt", "crds", "kinds"), [
    ("policyreport", "policyreport", ("PolicyReport", "ClusterPolicyReport")),
    ("openreports", "openreports", ("Report", "ClusterReport"))])
def test_report_streams_are_valid_against_their_api_schema(report: AuditReport, fmt: str, crds: str,
                                                             kinds: tuple[str, str]) -> None:
    """Both report APIs, strictly: a field the CRD does not declare would be pruned by the apiserver and never
    reach Policy Reporter."""
    import jsonschema

    from tests.support.crd_schemas import crd_schemas

    schemas = crd_schemas(REPO / "tests" / "support" / crds / "crds.yaml")
    assert set(schemas) == set(kinds)
    docs = list(yaml.safe_load_all(rendered(report, fmt)))
    assert {d["kind"] for d in docs} == set(kinds)
    for doc in docs:
        jsonschema.validate(doc, schemas[doc["kind"]])
    if fmt == "openreports":
        assert all(d["apiVersion"] == "openreports.io/v1alpha1" and d["source"] == "gpuguard" for d in docs)
        # the same findings as the PolicyReports, result for result
        same = list(yaml.safe_load_all(rendered(report, "policyreport")))

        def untimed(reports: list[dict]) -> list[list[dict]]:
            return [[{k: v for k, v in r.items() if k != "timestamp"} for r in d["results"]] for d in reports]

        assert untimed(docs) == untimed(same)


# ---------------------------------------------------------------------------------------------- table, html
def test_table_lists_findings_changes_and_summary(report: AuditReport) -> None:
    text = rendered(report, "table", width=140)
    assert "DENY" in text and "bert-large-pretrain" in text and "checkpoint-volume" in text
    assert "would change" in text and "spec.ttlSecondsAfterFinished" in text
    assert "Findings by policy" in text and "Cost at risk (estimate)" in text
    assert "invalid YAML" in text and "broken-stream.yaml:23" in text
    assert "exit 2" in text
    assert "\x1b[" not in text  # no colour codes in plain output
    assert "ConfigMap" not in text  # non-workloads only with --verbose
    assert "ConfigMap" in rendered(report, "table", width=140, verbose=True)


def test_table_diff_option_shows_unified_yaml_diff() -> None:
    report = make_report([str(MANIFESTS / "training" / "jobset-gpt.yaml")])
    text = rendered(report, "table", width=140, diff=True)
    assert "(submitted)" in text and "(after gpuguard)" in text
    assert any(line.strip().startswith("+") and line.strip().endswith("affinity:") for line in text.splitlines())


def test_html_is_self_contained(report: AuditReport) -> None:
    page = htmlreport.build(report)
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    # The only URL is the SVG namespace identifier, which browsers never fetch.
    urls = set(re.findall(r"(?:https?:)?//[\w.-]+[^\s\"'<>)]*", page))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count("<svg") == 2
    assert "bert-large-pretrain" in page and "Cost at risk" in page and 'class="add"' in page


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_renders_an_empty_audit(fmt: str) -> None:
    assert rendered(AuditReport([], catalog=load_catalog()), fmt)
