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

from gpuguard.workloads.kinds.argo.workflow import (
    MAX_DAG_TASKS,
    MAX_TEMPLATES,
    TooLarge,
    heaviest_antichain,
    most_at_once,
    peak,
)
from gpuguard.workloads.kinds.spark import operator as spark
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


# ------------------------------------------------------------------ Argo: bounded, linear work

def edmonds_karp_antichain(nodes: list[str], edges: list[tuple[str, str]], weight: dict[str, int]) -> list[str]:
    """The former algorithm (one breadth-first search per augmenting path), kept as an oracle."""
    index = {n: i for i, n in enumerate(nodes)}
    source, sink = 2 * len(nodes), 2 * len(nodes) + 1
    big = sum(max(w, 0) for w in weight.values()) + 1
    residual: dict[int, dict[int, int]] = {v: {} for v in range(2 * len(nodes) + 2)}

    def arc(a: int, b: int, forward: int, backward: int) -> None:
        residual[a][b] = residual[a].get(b, 0) + forward
        residual[b][a] = residual[b].get(a, 0) + backward

    for n, i in index.items():
        w = max(weight.get(n, 0), 0)
        arc(source, 2 * i, big, w)
        arc(2 * i, 2 * i + 1, big, 0)
        arc(2 * i + 1, sink, big, w)
    for before, after in edges:
        arc(2 * index[before] + 1, 2 * index[after], big, 0)
    while True:
        parent = {sink: sink}
        queue = [sink]
        for v in queue:
            for u, cap in residual[v].items():
                if cap > 0 and u not in parent:
                    parent[u] = v
                    queue.append(u)
        if source not in parent:
            break
        path, v = [], source
        while v != sink:
            path.append((parent[v], v))
            v = parent[v]
        push = min(residual[a][b] for a, b in path)
        for a, b in path:
            residual[a][b] -= push
            residual[b][a] += push
    return [n for n, i in index.items() if 2 * i + 1 in parent and 2 * i not in parent and weight.get(n, 0) > 0]


def random_dag_workflow(rng: random.Random, tasks: int, pods: int) -> dict:
    names = [f"t{i}" for i in range(tasks)]
    dag = [{"name": n, "template": f"p{rng.randrange(pods)}",
            "dependencies": [m for m in names[:i] if rng.random() < 0.35]} for i, n in enumerate(names)]
    for task in dag:
        if rng.random() < 0.3:
            task["withItems"] = list(range(rng.randint(0, 3)))
    return {"entrypoint": "main", "templates": [{"name": "main", "dag": {"tasks": dag}},
                                                *[{"name": f"p{k}", "container": {}} for k in range(pods)]]}


def test_the_max_flow_weighs_the_same_as_the_former_algorithm_on_random_dags():
    rng = random.Random(12)
    for _ in range(300):
        nodes = [f"t{i}" for i in range(rng.randint(1, 12))]
        edges = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:] if rng.random() < 0.35]
        weight = {n: rng.choice([0, 1, 2, 8]) for n in nodes}
        chosen, former = heaviest_antichain(nodes, edges, weight), edmonds_karp_antichain(nodes, edges, weight)
        assert sum(weight[n] for n in chosen) == sum(weight[n] for n in former)


def test_every_templates_count_in_one_walk_equals_weighing_one_template_at_a_time():
    rng = random.Random(7)
    for _ in range(150):
        spec = random_dag_workflow(rng, rng.randint(1, 12), rng.randint(1, 4))
        counts = most_at_once(spec)
        for k in range(4):
            one = peak(spec, lambda n, k=k: 1 if n == f"p{k}" else 0).get(f"p{k}", 0)
            assert counts.get(f"p{k}", 1) == max(one, 1)  # what the template locator gives each template


def nested_steps(depth: int) -> dict:
    """``s0`` calls ``s1`` ... each level with a GPU pod beside the next: deeper than any recursion limit."""
    templates = [{"name": f"s{i}", "steps": [[{"name": "pod", "template": "train"},
                                              {"name": "deeper", "template": f"s{i + 1}"}]]} for i in range(depth)]
    return {"entrypoint": "s0", "templates": [*templates, {"name": "train", "container": {}}]}


def test_deep_and_wide_steps_are_walked_without_recursion():
    deep = nested_steps(MAX_TEMPLATES - 1)
    assert most_at_once(deep) == {"train": MAX_TEMPLATES - 1}
    wide = {"entrypoint": "main", "templates": [
        {"name": "main", "steps": [[{"name": f"s{i}", "template": "train"} for i in range(5000)]]},
        {"name": "train", "container": {}}]}
    assert peak(wide, lambda n: 1) == {"train": 5000}


def test_a_dag_at_the_task_bound_is_judged_and_larger_ones_are_refused_naming_the_bound():
    chain = [{"name": f"t{i}", "template": "train", "dependencies": [f"t{i - 1}"] if i else []}
             for i in range(MAX_DAG_TASKS)]
    wf = workflow([{"name": "main", "dag": {"tasks": chain}}, pod("train", 8)])
    decision = engine_with().evaluate(wf)
    assert decision.error is None and decision.gpus == 8  # one task after another
    for size in (3_000, 20_000):
        wide = [{"name": f"t{i}", "template": "train"} for i in range(size)]
        refused = engine_with().evaluate(workflow([{"name": "main", "dag": {"tasks": wide}}, pod("train", 8)]))
        assert not refused.allowed and "MAX_DAG_TASKS" in refused.error and str(MAX_DAG_TASKS) in refused.error
    with pytest.raises(TooLarge, match="MAX_TEMPLATES"):
        most_at_once(nested_steps(MAX_TEMPLATES + 1))
