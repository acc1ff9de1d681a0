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


# ---------------------------------------------------------------- null and unreadable accelerator counts
def _gpu_pod(limits: dict, requests: dict | None = None) -> dict:
    resources: dict = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {
        "restartPolicy": "Never", "containers": [{"name": "a", "image": "x", "resources": resources}]}}


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "huawei.com/Ascend910", "google.com/tpu", "acme.ai/npu"])
def test_a_null_accelerator_count_is_refused_not_read_as_no_gpu(resource):
    """``nvidia.com/gpu:`` with no value once admitted a GPU pod as CPU; an unknown vendor's too (it may be one)."""
    decision = Engine(load_config(None)).evaluate(_gpu_pod({resource: None}))
    assert decision.allowed is False and decision.invalid
    (violation,) = decision.violations
    assert violation.policy == "invalid-quantity"
    assert violation.path == f"spec.containers[0].resources.limits[{resource}]"
    assert violation.message.startswith("null is not a usable quantity: an accelerator count must be a number")


def test_a_null_accelerator_request_beside_a_valid_limit_is_refused_too():
    found = prechecks.find(_gpu_pod({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": None}))
    assert [prechecks._dotted(f.path) for f in found] == ["spec.containers[0].resources.requests[nvidia.com/gpu]"]


@pytest.mark.parametrize("value", [[1], {"count": 1}, True, "two", "", "1e800000"])
def test_an_accelerator_count_that_is_no_quantity_is_refused(value):
    (found,) = prechecks.find(_gpu_pod({"huawei.com/Ascend910": value}))
    assert found.path[-1] == "huawei.com/Ascend910" and "not a usable quantity" in found.problem


@pytest.mark.parametrize("resource", ["cpu", "memory", "ephemeral-storage", "rdma/hca_shared_devices_a",
                                      "smarter-devices/fuse"])
def test_null_native_and_non_accelerator_resources_stay_unset(resource):
    """``cpu: null`` is "unset" (a default may fill it); a null NIC or FUSE device is no accelerator count."""
    assert prechecks.find(_gpu_pod({"nvidia.com/gpu": 1, resource: None})) == []


def test_a_null_accelerator_count_is_refused_in_every_template_of_a_crd():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "j"}, "spec": {
        "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "x", "resources": {"limits": {"cambricon.com/mlu": None}}}]}}}}}}
    decision = Engine(load_config(None)).evaluate(job)
    assert not decision.allowed and [v.policy for v in decision.violations] == ["invalid-quantity"]
