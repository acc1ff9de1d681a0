"""Bounded-cost quantity parsing with Kubernetes' own range, and the invalid-quantity finding."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuguard.policies import REGISTRY
from gpuguard.webhook.config import load_config, parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine import prechecks
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import quantity


@pytest.mark.parametrize(("text", "value"), [
    ("1", 1), ("500m", Decimal("0.5")), ("64Gi", 64 * 2**30), ("1e3", 1000), ("1E3", 1000), ("+3k", 3000),
    (".5", Decimal("0.5")), ("5.", 5), ("-1", -1), ("1.5k", 1500), ("100n", Decimal("1E-7")),
    ("9223372036854775807", 2**63 - 1), ("7Ei", 7 * 2**60), (2, 2), (2.5, Decimal("2.5")), (" 8 ", 8),
])
def test_valid_quantities_parse_to_their_value(text, value):
    assert quantity.parse(text) == Decimal(value)
    assert quantity.problem(text) is None


def test_integral_results_are_plain_integers():
    assert str(quantity.parse("1e3")) == "1000"


@pytest.mark.parametrize(("text", "reason"), [
    ("1e800000", "exponent out of range"), ("1e5000", "exponent out of range"),
    ("0e99999", "exponent out of range"), ("1e-50", "exponent out of range"),
    ("9223372036854775808", "larger than Kubernetes allows"), ("8Ei", "larger than Kubernetes allows"),
    ("1e19", "larger than Kubernetes allows"), ("NaN", "malformed"), ("Infinity", "malformed"),
    ("inf", "malformed"), ("1.2.3", "malformed"), ("", "malformed"), ("1" * 65, "longer than 64"),
    (float("inf"), "not a finite number"), (float("nan"), "not a finite number"), (10**30, "larger than"),
    (True, "neither a number nor a string"), ({"a": 1}, "a dict"), ([1], "a list"),
])
def test_invalid_quantities_say_why_and_parse_to_none(text, reason):
    assert quantity.parse(text) is None
    assert reason in (quantity.problem(text) or "")


def test_missing_value_is_not_a_problem_for_parse():
    assert quantity.parse(None) is None


def test_finding_lists_every_bad_value_with_its_path():
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {
        "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1e800000", "cpu": "1"}}}],
        "initContainers": [{"name": "i", "resources": {"requests": {"memory": "NaN"}}}],
        "overhead": {"cpu": "Infinity"},
        "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1e5000"}}]}}
    found = prechecks.find(pod)
    assert [prechecks._dotted(f.path) for f in found] == [
        "spec.containers[0].resources.limits[nvidia.com/gpu]", "spec.initContainers[0].resources.requests.memory",
        "spec.overhead.cpu", "spec.volumes[0].emptyDir.sizeLimit"]
    assert found[0].problem == '"1e800000" is not a usable quantity: exponent out of range'


def test_the_engine_denies_bad_quantities_before_any_policy_whatever_the_config():
    """An engine step, not a policy: even with every policy off, nothing after it could judge the object."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "1e800000"}}}]}}
    all_off = "\n".join(f"  {pid}: {{action: off}}" for pid in REGISTRY)
    config = parse_config_text(f"kind: GpuguardConfig\nfailureMode: open\npolicies:\n{all_off}\n")
    decision = Engine(config).evaluate(pod)
    assert decision.allowed is False and decision.invalid and decision.error is None and decision.patch == []
    (violation,) = decision.violations
    assert (violation.policy, violation.verdict) == ("invalid-quantity", "deny")
    assert violation.path == "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert violation.text.startswith('[invalid-quantity] spec.containers[0].resources.limits[nvidia.com/gpu]: '
                                     '"1e800000" is not a usable quantity')


def test_an_update_is_judged_only_for_the_bad_quantities_it_brings():
    old = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "a", "resources": {"limits": {"cpu": "NaN"}}}]}}
    new = {**old, "metadata": {"name": "p", "labels": {"touched": "yes"}}}
    engine = Engine(load_config(None))
    kept = engine.evaluate(new, RequestContext(operation="UPDATE", old_object=old))
    assert not any(v.policy == "invalid-quantity" for v in kept.violations)
    created = engine.evaluate(new, RequestContext(operation="CREATE"))
    assert [v.policy for v in created.violations] == ["invalid-quantity"]


def test_finding_walks_every_template_of_a_crd():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {
        "Worker": {"template": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1e9999"}}}]}}}}}}
    (found,) = prechecks.find(job)
    assert found.path[:3] == ("spec", "pytorchReplicaSpecs", "Worker")


def test_finding_is_bounded_and_ignores_unknown_kinds():
    many = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
        {"resources": {"limits": {"cpu": "NaN"}}} for _ in range(500)]}}
    assert len(prechecks.find(many)) == prechecks.MAX_FINDINGS
    assert prechecks.find({"apiVersion": "v1", "kind": "ConfigMap", "data": {"cpu": "NaN"}}) == []
    assert prechecks.find("not an object") == []
