"""Kinds that write pods their own way: Spark applications and Argo workflows.

Spark's driver/executor specs are a pod and its main container at once (``cores``, ``memory``,
``gpu`` or sparkConf); Argo's templates run in turn (steps, DAG) and inherit pod fields from
the workflow.  The shared kind matrices expect PodSpecs, so these kinds are tested here.
"""

from __future__ import annotations

import copy
import itertools
import random

import pytest

from gpuguard.workloads import spark
from gpuguard.workloads.argo import heaviest_antichain, peak
from tests.support.builders import ADAPTED_KINDS, make, pvc_pod_spec
from tests.support.engines import engine_with, evaluate_twice, only

GPU = {"limits": {"nvidia.com/gpu": 8}}


def spark_app(executor: dict, conf: dict | None = None, **spec) -> dict:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": "etl", "namespace": "ml"},
            "spec": {"type": "Scala", "mode": "cluster", "image": "ghcr.io/example/spark:3.5",
                     "mainApplicationFile": "local:///opt/app.jar", "sparkVersion": "3.5.1",
                     "sparkConf": conf or {}, "driver": {"cores": 1, "memory": "2g"}, "executor": executor, **spec}}


def workflow(templates: list, **spec) -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "wf", "namespace": "ml"},
            "spec": {"entrypoint": "main", "templates": templates, **spec}}


def pod(name: str, gpus: int = 0, **extra) -> dict:
    container = {"image": "ghcr.io/example/train:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"name": name, "container": container, **extra}


# ------------------------------------------------------------------------------------------ Spark

@pytest.mark.parametrize(("text", "size"), [("4g", 4 * 2**30), ("512m", 512 * 2**20), ("2048", 2048 * 2**20),
                                            ("1.5g", int(1.5 * 2**30)), ("lots", None), ("-1g", None)])
def test_spark_memory_is_read_in_jvm_units(text, size):
    assert spark.jvm_bytes(text) == (None if size is None else size)


def test_spark_gpus_come_from_the_typed_field_or_from_spark_conf():
    engine = engine_with()
    typed = engine.evaluate(spark_app({"instances": 3, "gpu": {"name": "nvidia.com/gpu", "quantity": 2}}))
    conf = engine.evaluate(spark_app({"instances": 3}, {"spark.executor.resource.gpu.amount": "1",
                                                        "spark.executor.resource.gpu.vendor": "nvidia.com"}))
    assert typed.gpus == 6 and conf.gpus == 3


def test_spark_executor_count_follows_dynamic_allocation():
    assert spark.executors({"executor": {}}) == (1, False)
    assert spark.executors({"executor": {"instances": 4}, "dynamicAllocation": {"enabled": True,
                                                                                 "maxExecutors": 10}}) == (10, False)
    assert spark.executors({"executor": {"instances": 2}, "dynamicAllocation": {"enabled": True}}) == (2, True)
    assert spark.executors({"sparkConf": {"spark.dynamicAllocation.enabled": "true",
                                          "spark.dynamicAllocation.maxExecutors": "6"}}) == (6, False)


def test_unbounded_dynamic_allocation_with_gpus_is_denied_with_the_field_that_bounds_it():
    decision = only("gpu-request-shape").evaluate(spark_app({"gpu": {"name": "nvidia.com/gpu", "quantity": 1},
                                                             "instances": 1}, dynamicAllocation={"enabled": True}))
    [finding] = decision.denials
    assert finding.path == "spec.executor" and "spec.dynamicAllocation.maxExecutors" in finding.fix


def test_spark_sizing_writes_spark_fields_and_leaves_room_for_the_overhead():
    decision = evaluate_twice(only("default-resources"),
                              spark_app({"instances": 2, "gpu": {"name": "nvidia.com/gpu", "quantity": 1}}))
    executor = decision.mutated["spec"]["executor"]
    assert "resources" not in executor  # Spark would drop it: the operator writes the container's resources
    heap = spark.jvm_bytes(executor["memory"])
    assert heap * spark.overhead_factor(decision.mutated["spec"]) + heap <= 64 * 2**30  # the pod is 64Gi at most
    assert executor["coreRequest"] == "8" and "cores" not in executor  # task slots stay the user's
    assert decision.mutated["spec"]["driver"] == {"cores": 1, "memory": "2g"}


def test_spark_defaults_are_never_lowered():
    """A CPU driver on Spark's defaults (1 core, 1g heap) keeps them: flat sizing would shrink it."""
    app = spark_app({"gpu": {"name": "nvidia.com/gpu", "quantity": 1}, "memory": "32g", "cores": 8})
    app["spec"]["driver"] = {}
    decision = evaluate_twice(only("default-resources"), app)
    assert decision.mutated["spec"]["driver"] == {}


def test_spark_executor_memory_the_user_set_is_kept_and_judged_with_its_overhead():
    app = spark_app({"gpu": {"name": "nvidia.com/gpu", "quantity": 2}, "memory": "8g", "cores": 4})
    engine = engine_with()
    decision = engine.evaluate(app)
    assert decision.mutated["spec"]["executor"]["memory"] == "8g"
    [low] = [v for v in decision.violations if v.policy == "gpu-memory-guard"]
    assert "per device" in low.message and "executor.memory" in low.fix


def test_no_ephemeral_storage_warning_for_a_field_spark_does_not_have():
    decision = engine_with().evaluate(spark_app({"gpu": {"name": "nvidia.com/gpu", "quantity": 1}}))
    assert not [v for v in decision.violations if v.policy == "ephemeral-storage"]


def test_spark_is_batch_work_unless_declared_training():
    app = spark_app({"gpu": {"name": "nvidia.com/gpu", "quantity": 1}})
    assert engine_with().evaluate(app).allowed
    app["metadata"]["labels"] = {"gpuguard.io/workload-class": "training"}
    decision = engine_with().evaluate(app)
    assert not decision.allowed and {v.policy for v in decision.denials} == {"checkpoint-volume"}


# ------------------------------------------------------------------------------------------- Argo

def test_sequential_steps_count_their_heaviest_step_not_the_sum():
    wf = workflow([{"name": "main", "steps": [[{"name": "p", "template": "prep"}], [{"name": "t", "template": "train"}],
                                              [{"name": "a", "template": "eval"}, {"name": "b", "template": "eval"}]]},
                   pod("prep"), pod("train", 8), pod("eval", 1)])
    assert engine_with().evaluate(wf).gpus == 8


def test_fan_out_and_parallel_steps_add_up():
    wf = workflow([{"name": "main", "steps": [[{"name": "t", "template": "train", "withItems": [1, 2, 3]},
                                               {"name": "e", "template": "eval"}]]},
                   pod("train", 8), pod("eval", 1)])
    assert engine_with().evaluate(wf).gpus == 25
    wf["spec"]["parallelism"] = 2  # the two heaviest pods at most
    assert engine_with().evaluate(wf).gpus == 16


def test_dag_tasks_that_do_not_wait_for_each_other_overlap_whatever_their_depth():
    """``train`` starts when ``fetch`` ends, while ``baseline`` (no dependencies) may still run."""
    wf = workflow([{"name": "main", "dag": {"tasks": [
        {"name": "fetch", "template": "one"}, {"name": "baseline", "template": "eight"},
        {"name": "train", "template": "eight", "depends": "fetch.Succeeded"}]}},
        pod("one", 1), pod("eight", 8)])
    assert engine_with().evaluate(wf).gpus == 16


def test_a_library_workflow_template_without_entrypoint_counts_its_heaviest_template():
    wf = workflow([pod("small", 1), pod("big", 4)])
    del wf["spec"]["entrypoint"]
    wf["kind"] = "WorkflowTemplate"
    assert engine_with().evaluate(wf).gpus == 4


def test_recursive_templates_and_huge_fan_outs_are_judged_not_an_error():
    wf = workflow([{"name": "main", "steps": [[{"name": "again", "template": "main"},
                                               {"name": "t", "template": "train",
                                                "withSequence": {"count": "9" * 40}}]]}, pod("train", 1)])
    assert engine_with().evaluate(wf).gpus == 1  # an unreadable count counts once


def test_heaviest_antichain_matches_brute_force_on_random_dags():
    rng = random.Random(12)
    for _ in range(300):
        nodes = [f"t{i}" for i in range(rng.randint(1, 7))]
        edges = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:] if rng.random() < 0.35]
        weight = {n: rng.choice([0, 1, 2, 8]) for n in nodes}
        after = {n: {b for a, b in edges if a == n} for n in nodes}
        for _ in nodes:  # transitive closure
            for n in nodes:
                after[n] |= set().union(*(after[m] for m in after[n])) if after[n] else set()

        def antichain(group, after=after) -> bool:
            return all(b not in after[a] and a not in after[b] for a, b in itertools.combinations(group, 2))

        best = max(sum(weight[n] for n in g) for r in range(len(nodes) + 1)
                   for g in itertools.combinations(nodes, r) if antichain(g))
        chosen = heaviest_antichain(nodes, edges, weight)
        assert antichain(chosen) and sum(weight[n] for n in chosen) == best


def test_peak_of_no_workflow_is_empty():
    assert peak(None, lambda n: 1) == {} and peak({"templates": "x"}, lambda n: 1) == {}


def test_a_template_keeps_the_workflow_tolerations_it_would_have_inherited():
    spot = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    steps = [[{"name": "t", "template": "train"}], [{"name": "c", "template": "cpu"}]]
    wf = workflow([{"name": "main", "steps": steps}, pod("train", 8), pod("cpu")], tolerations=[spot])
    decision = evaluate_twice(only("gpu-tolerations"), wf)
    train, cpu = decision.mutated["spec"]["templates"][1:]
    assert train["tolerations"][0] == spot and len(train["tolerations"]) == 2
    assert "tolerations" not in cpu  # nothing changed there: it still inherits
    assert decision.mutated["spec"]["tolerations"] == [spot]


def test_template_defaults_come_before_the_workflow_and_an_empty_list_counts_as_unset():
    mine = {"key": "team", "operator": "Exists"}
    wf = workflow([pod("train", 8, tolerations=[])], templateDefaults={"tolerations": [mine]},
                  tolerations=[{"key": "spot", "operator": "Exists"}])
    wf["spec"]["entrypoint"] = "train"
    decision = evaluate_twice(only("gpu-tolerations"), wf)
    assert decision.mutated["spec"]["templates"][0]["tolerations"][0] == mine


def test_a_workflow_priority_class_reaches_its_templates():
    wf = workflow([pod("train", 8)], podPriorityClassName="training-standard")
    wf["spec"]["entrypoint"] = "train"
    decision = evaluate_twice(only("priority-class"), wf)
    assert decision.patch == [] and decision.mutated == wf


def test_workflow_volumes_and_claim_templates_back_checkpoints():
    mount = {"volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}
    train = pod("train", 8)
    train["container"].update(mount)
    wf = workflow([train], volumeClaimTemplates=[{"metadata": {"name": "ckpt"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}])
    wf["spec"]["entrypoint"] = "train"
    assert only("checkpoint-volume").evaluate(wf).allowed
    del wf["spec"]["volumeClaimTemplates"]
    assert not only("checkpoint-volume").evaluate(wf).allowed


@pytest.mark.parametrize("kind", ADAPTED_KINDS)
def test_every_adapted_kind_is_mutated_idempotently_and_its_patch_applies(kind):
    obj = make(kind, pvc_pod_spec(gpus=2), replicas=2)
    decision = evaluate_twice(engine_with(), copy.deepcopy(obj))
    assert decision.gpus == 4 and decision.mutated_by


def test_argo_per_outcome_ttls_are_capped_too():
    """Argo uses secondsAfterFailure before secondsAfterCompletion: a 30-day one would outlive the cap."""
    wf = workflow([pod("train", 8)], ttlStrategy={"secondsAfterSuccess": 600, "secondsAfterFailure": 2592000})
    wf["spec"]["entrypoint"] = "train"
    ttl = evaluate_twice(only("job-ttl"), wf).mutated["spec"]["ttlStrategy"]
    assert ttl == {"secondsAfterSuccess": 600, "secondsAfterFailure": 604800, "secondsAfterCompletion": 86400}
