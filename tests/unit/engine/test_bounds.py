"""Objects past the engine's size bounds are refused naming the bound, before any walk that grows
with them; objects at the bounds are judged."""

from __future__ import annotations

import pytest

from gpuguard.webhook.engine.prechecks import MAX_CONTAINERS, MAX_POD_TEMPLATES
from tests.support.engines import engine_with

GPU = {"limits": {"nvidia.com/gpu": 1}}


def jobset(replicated: int) -> dict:
    def one(i: int) -> dict:
        return {"name": f"r{i}", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": GPU}]}}}}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j", "namespace": "ml"},
            "spec": {"replicatedJobs": [one(i) for i in range(replicated)]}}


def pod(containers: int) -> dict:
    listed = [{"name": f"c{i}", "image": "x", "resources": {"limits": {"cpu": "1"}}} for i in range(containers)]
    listed[0]["resources"] = GPU
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
            "spec": {"restartPolicy": "Never", "containers": listed}}


@pytest.mark.parametrize(("build", "bound", "name"), [(jobset, MAX_POD_TEMPLATES, "MAX_POD_TEMPLATES"),
                                                      (pod, MAX_CONTAINERS, "MAX_CONTAINERS")])
def test_past_a_bound_is_refused_naming_it_and_at_it_is_judged(build, bound, name):
    refused = engine_with().evaluate(build(bound + 1))
    assert not refused.allowed and name in refused.error and str(bound) in refused.error
    judged = engine_with().evaluate(build(bound))
    assert judged.error is None and judged.gpus >= 1


def test_failure_mode_open_lets_an_object_past_a_bound_through_with_the_reason():
    decision = engine_with(extra="failureMode: open\n").evaluate(pod(MAX_CONTAINERS + 1))
    assert decision.allowed and "MAX_CONTAINERS" in decision.error
