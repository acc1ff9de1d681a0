"""An object no enabled policy acts on leaves the engine after the read phase, and nothing changes for it.

A CPU object under policies whose ``cpu_scope`` leaves CPU objects out gets no class reading and runs no policy
(issue 33: "a CPU object leaves after the read phase"); its class is read only when a shell asks for it.  The
premise is each policy's own word (``Policy.cpu_scope``), so these tests compare the early answer with the full
evaluation, which the engine still runs when ``judged_by_any_policy`` is forced, on every kind and several
command lines, and check what must still reach the policies: priority classes in scope, custom rules, DRA claims.
"""

from __future__ import annotations

import pytest

from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine import core
from tests.support.builders import ALL_KINDS, container, cpu_container, make
from tests.support.engines import engine_with

CREATE = RequestContext(operation="CREATE", namespace="ml", mutate=True, validate=True)
SPECS = {
    "plain": {"containers": [cpu_container()]},
    "notebook-like": {"containers": [container("jupyter/base-notebook", ["jupyter", "lab"])]},
    "server-like": {"containers": [container("ghcr.io/acme/api:1", ["uvicorn", "app:app", "--port", "8080"])]},
    "training-like": {"containers": [container("python:3.11", ["torchrun", "train.py"])],
                      "restartPolicy": "Never"},
}


def _entry(decision) -> dict:
    entry = decision.result_entry()
    entry["workloadClass"] = decision.workload_class
    return entry


def _full(engine, obj, monkeypatch) -> dict:
    with monkeypatch.context() as patched:
        patched.setattr(core, "judged_by_any_policy", lambda view, policy_set: True)
        return _entry(engine.evaluate(obj, CREATE))


@pytest.mark.parametrize("spec_name", list(SPECS))
@pytest.mark.parametrize("kind", ALL_KINDS)
def test_a_cpu_object_answered_early_is_answered_as_the_full_evaluation_answers(kind, spec_name, monkeypatch):
    engine = engine_with()
    obj = make(kind, SPECS[spec_name])
    early = engine.evaluate(obj, CREATE)
    assert early.class_reader is not None  # answered early: nothing read its class yet
    assert _entry(early) == _full(engine, obj, monkeypatch)


def test_the_class_of_an_unjudged_object_is_read_only_when_asked(monkeypatch):
    engine = engine_with()
    calls = []
    real = engine.read_class
    monkeypatch.setattr(engine, "read_class", lambda *a, **k: calls.append(1) or real(*a, **k))
    decision = engine.evaluate(make("Deployment", SPECS["notebook-like"]), CREATE)
    assert calls == [] and decision.allowed and decision.patch == [] and decision.validated_from == 0
    assert decision.workload_class == "notebook" and calls == [1]
    assert decision.workload_class == "notebook" and calls == [1]  # read once


def test_a_gpu_object_is_classified_and_judged():
    trainer = container("python", ["python", "t.py"], resources={"limits": {"nvidia.com/gpu": 1}})
    decision = engine_with().evaluate(make("Job", {"containers": [trainer], "restartPolicy": "Never"}), CREATE)
    assert decision.judged_class == "training" and decision.class_reader is None and decision.mutated_by


def test_a_cpu_object_using_a_reserved_priority_class_still_reaches_priority_abuse():
    spec = {"containers": [cpu_container()], "priorityClassName": "inference-critical"}
    decision = engine_with().evaluate(make("Job", spec), CREATE)
    assert any(v.policy == "priority-abuse" for v in decision.violations), decision.violations
    assert decision.class_reader is None


def test_a_cpu_object_reaches_a_policy_configured_for_cpu_objects():
    decision = engine_with("  job-ttl: {gpuOnly: false}\n").evaluate(make("Job", SPECS["plain"]), CREATE)
    assert "job-ttl" in decision.mutated_by


def test_custom_rules_see_every_object():
    rule = """customPolicies:
  - id: not-named-w
    title: Not named w
    action: enforce
    scope: object
    validations:
      - expression: "object.metadata.name != 'w'"
        message: named w
"""
    decision = engine_with(extra=rule).evaluate(make("Deployment", SPECS["plain"]), CREATE)
    assert [v.policy for v in decision.denials] == ["not-named-w"]


def test_a_cpu_pod_with_a_dra_claim_is_judged():
    spec = {"containers": [dict(cpu_container(), resources={"claims": [{"name": "gpu"}]})],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "missing"}]}
    decision = engine_with().evaluate(make("Pod", spec), CREATE)
    assert decision.class_reader is None
