"""The kind table: every KindSpec has a test builder, and the facts policies read are where they belong."""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import kinds
from tests.support.builders import (
    ADAPTED_KINDS,
    ALL_KINDS,
    BUILDER_NAMES,
    GANG_KINDS,
    RUNTIME_KINDS,
    has_builder,
    make,
    pvc_pod_spec,
    runtime_for,
)


@pytest.mark.parametrize("spec", kinds.KINDS, ids=lambda s: f"{s.kind}.{s.group or 'core'}")
def test_every_kind_has_a_builder_that_builds_that_kind(spec):
    name = BUILDER_NAMES[spec.api_group_kind]
    assert has_builder(name), f"add a builder for {name} to tests/support/builders.py:make"
    obj = make(name, pvc_pod_spec())
    assert kinds.lookup(obj["apiVersion"], obj["kind"]) is spec
    if spec.runtime is not None:  # its pod templates are in the runtime it names
        obj = spec.runtime.expand(obj, runtime_for(name, pvc_pod_spec()))
        spec = kinds.lookup(obj["apiVersion"], obj["kind"])
    assert list(spec.locate(obj)), f"{name}: the builder's object has no pod template the kind table finds"


def test_matrices_cover_every_kind_once():
    every = [*ALL_KINDS, *ADAPTED_KINDS]
    assert len(every) == len(set(every)) == len(kinds.KINDS) - len(RUNTIME_KINDS)


@pytest.mark.parametrize("name", RUNTIME_KINDS)
def test_runtime_kinds_are_judged_with_their_runtime_and_never_mutated(name):
    from gpuguard.webhook.objects import StaticLookup

    engine = Engine(parse_config_text("kind: GpuguardConfig\n"))
    obj = make(name, pvc_pod_spec(gpus=8), replicas=9)  # 9 nodes x 8 GPUs: over the 64 total
    ctx = RequestContext(namespace="ml", lookup=StaticLookup([runtime_for(name, pvc_pod_spec(gpus=8))]))
    decision = engine.evaluate(obj, ctx)
    assert decision.gpus == 72 and decision.patch == []
    assert "gpu-request-shape" in {v.policy for v in decision.denials}
    assert all(v.path.startswith("runtime ClusterTrainingRuntime torch: ") for v in decision.violations)
    # Without its runtime it can't be judged: the failure mode decides, and the reason says what is missing.
    missing = engine.evaluate(obj, RequestContext(namespace="ml"))
    assert missing.error and "not found" in missing.error and missing.allowed
    # The mutating webhook leaves it alone: its JobSet is mutated when the Trainer creates it.
    assert engine.evaluate(obj, RequestContext(namespace="ml", validate=False)).patch == []


def test_kind_facts_policies_rely_on():
    by_name = {BUILDER_NAMES[k.api_group_kind]: k for k in kinds.KINDS}
    assert [n for n, k in by_name.items() if k.is_pod] == ["Pod"]
    assert by_name["VolcanoJob"].gang.own_scheduler == ("spec", "schedulerName")
    assert by_name["PyTorchJob"].gang.operator_policy == ("spec", "runPolicy", "schedulingPolicy")
    assert set(GANG_KINDS) == {"Job", "CronJob", "PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob",
                               "JAXJob", "JobSet", "VolcanoJob"}
    assert {n for n, k in by_name.items() if k.validated_by_apiserver} == {
        "Pod", "Job", "CronJob", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"}


def test_gang_kinds_setting_tells_the_two_jobs_apart():
    """``kinds: [Job.batch]`` checks the batch Job only; Volcano's Job shares the name but not the group."""
    engine = Engine(parse_config_text("kind: GpuguardConfig\npolicies:\n  gang-scheduling: {kinds: [Job.batch]}\n"))
    ctx = RequestContext(mutate=False)
    batch = engine.evaluate(make("Job", pvc_pod_spec(), replicas=4), ctx)
    volcano = make("VolcanoJob", pvc_pod_spec(), replicas=4)
    volcano["spec"]["schedulerName"] = "default-scheduler"
    assert [v.policy for v in batch.violations if v.policy == "gang-scheduling"] == ["gang-scheduling"]
    assert not [v for v in engine.evaluate(volcano, ctx).violations if v.policy == "gang-scheduling"]
    default = Engine(parse_config_text("kind: GpuguardConfig\n"))
    assert [v for v in default.evaluate(volcano, ctx).violations if v.policy == "gang-scheduling"]
