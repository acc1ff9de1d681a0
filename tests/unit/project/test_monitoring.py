"""deploy/monitoring/: the alert rules tested offline with promtool, the dashboard's queries checked.

promtool is Prometheus' own rule checker and rule unit-test runner, built from the Go module proxy
by ``tests/support/promtool/build.sh`` (``scripts/test.sh`` runs it first).  The rule tests
(``tests/monitoring/rules.test.yaml``) feed recorded series to each alert and say when it fires;
their expected annotations are filled in here from the rule file, so each text is written once.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.gotool import GoTool
from tests.support.paths import REPO

MONITORING = REPO / "deploy" / "monitoring"
RULES = MONITORING / "rules.yaml"
RULE_TESTS = REPO / "tests" / "monitoring" / "rules.test.yaml"
BUILD = REPO / "tests" / "support" / "promtool" / "build.sh"
# Metrics the apiserver and Prometheus themselves export, which the rules and dashboard also read.
FOREIGN_METRICS = {"up", "apiserver_admission_webhook_rejection"}  # suffixes (_count) cut off


PROMTOOL = GoTool("promtool", "PROMETHEUS_VERSION", BUILD)


@pytest.fixture(scope="module")
def promtool() -> Path:
    return PROMTOOL.require()


def _rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}


def _with_annotations(tests: dict[str, Any]) -> dict[str, Any]:
    """The rule tests with each expected alert's annotations taken from its rule ({{ $labels.X }} filled)."""
    rules = _rules()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                labels = alert["exp_labels"]
                alert["exp_annotations"] = {
                    key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m, lb=labels: lb[m.group(1)], text)
                    for key, text in rules[check["alertname"]]["annotations"].items()}
    return tests


def test_the_rules_are_valid(promtool: Path) -> None:
    result = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_each_alert_fires_on_its_series_and_only_then(promtool: Path, tmp_path: Path) -> None:
    tests = _with_annotations(yaml.safe_load(RULE_TESTS.read_text()))
    tested = {check["alertname"] for case in tests["tests"] for check in case["alert_rule_test"]}
    assert tested == set(_rules()), "every alert has a test"
    fired = {check["alertname"] for case in tests["tests"] for check in case["alert_rule_test"] if check["exp_alerts"]}
    assert fired == set(_rules()), "every alert is seen firing"
    (tmp_path / "rules.yaml").write_text(RULES.read_text())
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([str(promtool), "test", "rules", "rules.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails_the_rule_tests(promtool: Path, tmp_path: Path) -> None:
    """The runner really compares: an alert expected to stay quiet where it fires is a failure."""
    tests = _with_annotations(yaml.safe_load(RULE_TESTS.read_text()))
    case = next(c for c in tests["tests"] if c["alert_rule_test"][-1]["alertname"] == "GpuguardDown")
    case["alert_rule_test"][-1]["exp_alerts"] = []
    (tmp_path / "rules.yaml").write_text(RULES.read_text())
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([str(promtool), "test", "rules", "rules.test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode != 0 and "GpuguardDown" in result.stdout + result.stderr


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "dashboard.json").read_text())
    return [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]


def test_the_dashboard_queries_parse(promtool: Path, tmp_path: Path) -> None:
    """Each panel's query as a recording rule: promtool parses it as Prometheus would."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(_dashboard_queries())]}]}
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run([str(promtool), "check", "rules", str(tmp_path / "dashboard-rules.yaml")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_metric_read_is_one_gpuguard_exports() -> None:
    from prometheus_client.metrics import MetricWrapperBase

    from gpuguard.webhook.scan import metrics as scan_metrics
    from gpuguard.webhook.server import metrics

    # A family's name as prometheus_client keeps it: counters without _total.
    families = {m._name for module in (metrics, scan_metrics) for m in vars(module).values()
                if isinstance(m, MetricWrapperBase)}
    queries = [*_dashboard_queries(), *(r["expr"] for r in _rules().values())]
    read = {re.sub(r"_(total|bucket|count|sum)$", "", name)
            for expr in queries for name in re.findall(r"\b(gpuguard_[a-z_]+|apiserver_[a-z_]+|up)\b", expr)}
    assert {"gpuguard_admission_requests", "gpuguard_cert_expiry_timestamp_seconds", "gpuguard_scan_leader"} <= read
    assert {n for n in read if n.startswith("gpuguard_")} <= families, sorted(read - families - FOREIGN_METRICS)
    assert {n for n in read if not n.startswith("gpuguard_")} <= FOREIGN_METRICS


def test_the_prometheus_rule_carries_the_rule_file() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["metadata"]["namespace"] == "gpuguard"
    assert rule["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
