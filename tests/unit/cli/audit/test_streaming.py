"""``gpuguard audit`` streams: no item outlives its turn, and every format is still whole and well-formed.

An audit of 100,000 manifests held every decision (original and mutated object, patch) until the
report was written: about 23 KB each.  These tests count the items and decisions still alive while
the last object is being counted (weak references, after a garbage collection): a format that keeps
them, or a runner that collects them into a list, makes the count grow with the number of manifests.
Speed and the real memory figures are measured in ``bench/audit_scale.py``, not here.
"""

from __future__ import annotations

import gc
import io
import json
import weakref
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from gpuguard.webhook.catalog import load_catalog
from gpuguard.webhook.cli.audit import run as audit_run
from gpuguard.webhook.cli.audit.cost import Prices
from gpuguard.webhook.cli.audit.formats import FORMATS, RenderOptions, open_writer, render, sarif
from gpuguard.webhook.cli.audit.run import AuditItem, AuditReport, evaluate_all, file_context
from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.main import main
from gpuguard.webhook.manifests import Document, load
from tests.support.paths import REPO

MANIFESTS = REPO / "tests" / "fixtures" / "manifests"
TRAINJOB = REPO / "tests" / "policies" / "checkpoint-volume" / "trainjob" / "runtime-without-checkpoints"
GPU_JOB = """apiVersion: batch/v1
kind: Job
metadata:
  name: train-{i}
  namespace: team-{ns}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: ghcr.io/example/train:1
        resources:
          limits:
            nvidia.com/gpu: 2
"""
CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\n"


def corpus(tmp_path: Path, count: int) -> Path:
    """``count`` manifests: GPU Jobs (mutated, some denied for lack of checkpoints), ConfigMaps, a broken one."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    for i in range(count):
        text = CONFIG_MAP.format(i=i) if i % 5 == 4 else GPU_JOB.format(i=i, ns=i % 3)
        (folder / f"{i:04d}.yaml").write_text(text)
    (folder / "zz-broken.yaml").write_text("kind: [\n")
    return folder


@pytest.fixture
def alive(monkeypatch) -> list[int]:
    """After the audit: how many earlier items and decisions were still alive when the last item was counted."""
    refs: list[weakref.ref] = []
    seen: list[int] = []
    original = audit_run.Tally.add

    def add(self, item: AuditItem) -> None:
        original(self, item)
        refs.append(weakref.ref(item))
        if item.decision is not None:
            refs.append(weakref.ref(item.decision))
        if item.doc.source.endswith("zz-broken.yaml"):  # the last input: count what the earlier ones left
            gc.collect()
            seen.append(sum(1 for ref in refs[:-1] if ref() is not None))

    monkeypatch.setattr(audit_run.Tally, "add", add)
    return seen


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_no_item_outlives_its_turn(tmp_path: Path, alive: list[int], fmt: str, capsys) -> None:
    folder = corpus(tmp_path, 40)
    out = tmp_path / f"report.{fmt}"
    code = main(["audit", str(folder), "-o", fmt, "--output-file", str(out), "--diff" if fmt != "table" else "-v"])
    assert code == 2  # the broken file: an incomplete audit
    assert alive == [0], f"{alive} earlier items or decisions were kept while the audit ran"
    assert out.stat().st_size > 0
    if fmt != "table":
        assert "+++ Job team-0/train-0 (after gpuguard)" in capsys.readouterr().out  # --diff, as it went


def test_the_runner_is_lazy() -> None:
    """``evaluate_all`` hands out each item before it reads the next object (an endless input works)."""
    config = load_config(None)
    engine = Engine(config)

    def endless() -> Iterator[tuple[Document, object]]:
        i = 0
        while True:
            obj = yaml.safe_load(CONFIG_MAP.format(i=i))
            yield Document("gen", i, 1, 1, obj), file_context(obj, "default")
            i += 1

    items = evaluate_all(endless(), engine.evaluate, Prices.from_config(config))
    assert isinstance(items, Iterator)
    assert [next(items).doc.index for _ in range(3)] == [0, 1, 2]


def test_the_table_writes_each_item_as_it_comes(tmp_path: Path) -> None:
    config = load_config(None)
    engine = Engine(config)
    folder = corpus(tmp_path, 6)
    pairs = ((doc, file_context(doc.obj, "default")) for doc in load([str(folder)]))
    report = AuditReport(catalog=load_catalog())
    out = io.StringIO()
    writer = open_writer(report, "table", out, RenderOptions(width=120))
    sizes = []
    for item in evaluate_all(pairs, engine.evaluate, Prices.from_config(config)):
        report.count(item)
        writer.add(item)
        sizes.append(len(out.getvalue()))
    writer.finish()
    writer.close()
    shown = [size for size in sizes if size]
    assert len(shown) >= 5 and shown == sorted(shown) and len(set(shown)) >= 5  # written before the end
    assert "Summary" in out.getvalue()[sizes[-1]:]


def _report(paths: list[str], catalog: dict | None = None, fail_on: str = "deny") -> AuditReport:
    config = load_config(str(REPO / "tests" / "fixtures" / "configs" / "serving-grants.yaml"))
    engine = Engine(config)
    pairs = ((doc, file_context(doc.obj, "default")) for doc in load(paths))
    items = list(evaluate_all(pairs, engine.evaluate, Prices.from_config(config)))
    return AuditReport(items, fail_on=fail_on, catalog=load_catalog() if catalog is None else catalog,
                       sources=paths)


@pytest.fixture(scope="module")
def fixtures_report() -> AuditReport:
    return _report([str(MANIFESTS)])


def _rendered(report: AuditReport, fmt: str) -> str:
    out = io.StringIO()
    render(report, fmt, out, RenderOptions(width=120))
    return out.getvalue()


def test_json_is_the_whole_document_written_in_pieces(fixtures_report: AuditReport) -> None:
    whole = orjson.dumps({"$schema": "https://gpuguard.io/schemas/audit-result.schema.json",
                          **fixtures_report.to_dict()}, option=orjson.OPT_INDENT_2).decode() + "\n"
    assert _rendered(fixtures_report, "json") == whole
    empty = AuditReport(catalog=load_catalog())
    assert json.loads(_rendered(empty, "json"))["results"] == []


def test_sarif_rule_indexes_hold_when_policy_ids_are_met_on_the_way() -> None:
    """With no catalog every policy id is first met on the way, and the input rule's index comes last."""
    report = _report([str(MANIFESTS)], catalog={})
    run = sarif.build(report)["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert rules[-1]["id"] == "invalid-input"
    assert any(r["ruleId"] == "invalid-input" for r in run["results"])
    assert len(run["results"]) > 10
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_junit_counts_match_the_cases(fixtures_report: AuditReport) -> None:
    root = ET.fromstring(_rendered(fixtures_report, "junit").split("\n", 1)[1])
    suites = root.findall("testsuite")
    assert len(suites) > 3
    for element in [root, *suites]:
        listed = list(element.iter("testcase"))
        assert int(element.get("tests")) == len(listed)
        assert int(element.get("failures")) == sum(1 for c in listed if c.find("failure") is not None)
        assert int(element.get("errors")) == sum(1 for c in listed if c.find("error") is not None)


def test_policyreport_results_are_sorted_and_counted(fixtures_report: AuditReport) -> None:
    rank = {"error": 4, "fail": 3, "warn": 2, "skip": 1, "pass": 0}
    reports = list(yaml.safe_load_all(_rendered(fixtures_report, "policyreport")))
    namespaces = [r["metadata"].get("namespace") for r in reports if r["kind"] == "PolicyReport"]
    assert namespaces == sorted(namespaces) and len(namespaces) > 2
    assert reports[-1]["kind"] == "ClusterPolicyReport"  # the broken fixtures' input errors
    for report in reports:
        results = report["results"]
        keys = [(-rank[r["result"]], r["policy"]) for r in results]
        assert keys == sorted(keys)
        counted = {k: sum(1 for r in results if r["result"] == k) for k in rank}
        assert report["summary"] == counted


def test_html_lists_the_worst_first(fixtures_report: AuditReport) -> None:
    page = _rendered(fixtures_report, "html")
    assert page.rstrip().endswith("</body></html>")
    order = ["ERROR", "DENY", "WARN", "AUDIT", "MUTATE", "PASS"]
    workloads = page.split("<h2>Workloads", 1)[1]
    firsts = [workloads.index(f">{v}</span><b>") for v in order if f">{v}</span><b>" in workloads]
    assert firsts == sorted(firsts) and len(firsts) >= 3


def test_a_runtime_named_before_it_is_defined_is_found(tmp_path: Path, capsys) -> None:
    """Objects a workload names are collected in a first pass, so their place in the input does not matter."""
    code = main(["audit", str(TRAINJOB / "input.yaml"), str(TRAINJOB / "objects.yaml"), "--format", "json"])
    entry = json.loads(capsys.readouterr().out)["results"][0]
    assert code == 1
    assert any("no persistent volume" in v["message"] for v in entry["violations"])
    assert "torch-tune" in " ".join(v["message"] for v in entry["violations"])


def test_a_runtime_on_stdin_is_found_from_one_read(monkeypatch, capsys) -> None:
    text = (TRAINJOB / "input.yaml").read_text() + "---\n" + (TRAINJOB / "objects.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code = main(["audit", "-", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["summary"]["objects"] == 2
    assert any("no persistent volume" in v["message"] for v in data["results"][0]["violations"])


def test_junit_is_what_the_shared_writer_writes_for_the_same_suites(fixtures_report: AuditReport) -> None:
    from gpuguard.webhook.cli import junit as shared
    from gpuguard.webhook.cli.audit.formats import junit as audit_junit

    failing = audit_run.FAILING[fixtures_report.fail_on]
    suites: dict[str, shared.Suite] = {}
    for item in fixtures_report.items:
        suite = suites.setdefault(item.doc.source, shared.Suite(item.doc.source))
        if item.is_input_error:
            suite.cases.append(shared.Case(f"{item.doc.location} :: input", item.doc.source, error=shared.Outcome(
                item.error or "", item.error_type or "input", f"{item.doc.location}: {item.error}")))
        else:
            suite.cases.extend(audit_junit._workload_cases(item, fixtures_report, failing))
    whole = io.StringIO()
    shared.write(shared.build("gpuguard audit", suites.values()), whole)
    assert len(suites) > 3
    assert _rendered(fixtures_report, "junit") == whole.getvalue()
    empty = io.StringIO()
    shared.write(shared.build("gpuguard audit", []), empty)
    assert _rendered(AuditReport(catalog=load_catalog()), "junit") == empty.getvalue()
