"""Evidence before force: what a workload is comes from its kind's purpose and what its user declared; what its
work looks like (a word in a command line, an image, a sidecar) never removes a check, caps a value the user set
or denies.  A table of workloads written the way ML engineers write them, judged with the shipped default
config, as on a fresh install (no namespace grants anything)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuguard.webhook.decision import RequestContext
from tests.support.builders import container
from tests.support.engines import engine_with

ENGINE = engine_with()
CKPT = {"volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}
CKPT_VOLUME = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]


def _container(name: str, image: str, command: list[str] | None = None, args: list[str] | None = None,
               gpus: int = 8, **extra: object) -> dict:
    resources = {"limits": {"nvidia.com/gpu": gpus}} if gpus else None
    return container(image, command, args, resources, name, **extra)


def _pod_spec(*containers: dict, checkpoints: bool = False, **spec: object) -> dict:
    if checkpoints:
        containers = tuple({**c, **CKPT} if c.get("resources") else c for c in containers)
        spec = {**spec, "volumes": CKPT_VOLUME}
    return {"containers": list(containers), **spec}


def job(*containers: dict, pods: int = 1, labels: dict | None = None, checkpoints: bool = False,
        **job_spec: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "w", "labels": labels or {}},
            "spec": {"parallelism": pods, "completions": pods, **job_spec, "template": {
                "metadata": {"labels": {"app": "w"}},
                "spec": _pod_spec(*containers, checkpoints=checkpoints, restartPolicy="Never")}}}


def pod(*containers: dict, **spec: object) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"}, "spec": _pod_spec(*containers, **spec)}


def workload(api_version: str, kind: str, *containers: dict, labels: dict | None = None, **spec: object) -> dict:
    template = {"metadata": {"labels": {"app": "w"}}, "spec": _pod_spec(*containers)}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w", "labels": labels or {}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "w"}}, "template": template, **spec}}


@dataclass
class Case:
    """What the engine must make of ``obj``: its class, the checkpoint finding's verdict (``None``: no finding),
    whether it is admitted, and a deadline the user set that must be kept (``None``: not checked)."""

    obj: dict
    workload_class: str
    checkpoint: str | None
    allowed: bool
    deadline: int | None = None
    priority: str | None = None
    warns: set[str] = field(default_factory=set)


MULTI_DAY = 259200  # 3 days
CASES = {
    # Words that used to drop the checkpoint check on long multi-node training runs.
    "an evaluation before the training command": Case(job(_container(
        "trainer", "registry.example/llm:7", ["sh", "-c"],
        ["lm_eval --model hf --tasks hellaswag --limit 10; torchrun --nnodes 4 --nproc_per_node 8 main.py"]),
        pods=4), "training", "deny", False),
    "a training run whose script is named eval.py": Case(job(_container(
        "trainer", "registry.example/llm:7", ["torchrun", "--nnodes", "4", "--nproc_per_node", "8", "eval.py",
                                              "--max-steps", "400000"]), pods=4), "training", "deny", False),
    "nvidia-smi first, no checkpoints": Case(job(_container(
        "trainer", "registry.example/llm:7", ["bash", "-lc", "nvidia-smi && python -m mylab.launch cfg.yaml"])),
        "training", "deny", False),
    # Looks that used to cap a deadline the user set.
    "nvidia-smi first, checkpointed, 3 days": Case(job(_container(
        "trainer", "registry.example/llm:7", ["sh", "-c", "nvidia-smi; python -m mylab.launch cfg.yaml"]),
        checkpoints=True, activeDeadlineSeconds=MULTI_DAY), "training", None, True, MULTI_DAY),
    "a dmon sidecar beside a checkpointed 3-day run": Case(job(
        _container("trainer", "registry.example/llm:7", ["python", "-m", "mylab.launch"]),
        _container("gpu-stats", "nvcr.io/nvidia/cuda:12.6.2-base-ubuntu24.04", ["nvidia-smi", "dmon", "-d", "30"],
                   gpus=0), checkpoints=True, activeDeadlineSeconds=MULTI_DAY), "training", None, True, MULTI_DAY),
    "a benchmark look on a checkpointed 3-day run": Case(job(_container(
        "trainer", "registry.example/bench-and-train:1", ["python", "benchmark_then_train.py"]),
        checkpoints=True, activeDeadlineSeconds=MULTI_DAY), "training", None, True, MULTI_DAY),
    # Samples, benchmarks and dev pods: bare Pods say what they are for by their restartPolicy only.
    "the CUDA vector-add sample pod": Case(pod(_container(
        "cuda-vectoradd", "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0", gpus=1), restartPolicy="OnFailure"),
        "training", "warn", True),
    "an n-body benchmark pod": Case(pod(_container(
        "nbody", "nvcr.io/nvidia/k8s/cuda-sample:nbody", ["nbody"], ["-gpu", "-benchmark", "-numbodies=512000"],
        gpus=1), restartPolicy="Never"), "training", "warn", True),
    "an interconnect bandwidth probe pod": Case(pod(_container(
        "probe", "registry.example/tools/bandwidth-probe:0.8", ["/opt/probe/run-all"], gpus=8),
        restartPolicy="Never"), "training", "warn", True),
    "a sleep-infinity dev pod": Case(pod(_container(
        "dev", "registry.example/team/devbox:3", ["sleep", "infinity"], gpus=1)), "notebook", None, True,
        priority="notebook-dev"),
    # Servers and notebooks: judged as such without any grant, with non-preempting classes.
    "a vLLM Deployment": Case(workload("apps/v1", "Deployment", _container(
        "vllm", "vllm/vllm-openai:v0.11.0", None, ["--model", "Qwen/Qwen3-32B", "--tensor-parallel-size", "2"],
        gpus=2)), "inference", None, True, priority="inference-standard"),
    "a server from an image nobody lists": Case(workload("apps/v1", "Deployment", _container(
        "api", "registry.example/search/reranker-svc:41", ["/app/serve-bin"], gpus=1,
        ports=[{"containerPort": 7000}])), "inference", None, True, priority="inference-standard"),
    "a Jupyter StatefulSet": Case(workload("apps/v1", "StatefulSet", _container(
        "lab", "quay.io/jupyter/pytorch-notebook:cuda12-2024-12-09", ["start-notebook.py"], gpus=1),
        serviceName="w"), "notebook", None, True, priority="notebook-dev"),
    "a Kubeflow Notebook": Case({
        "apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "w"},
        "spec": {"template": {"spec": {"containers": [_container("w", "registry.example/nb:1", gpus=1)]}}}},
        "notebook", None, True),
    # A training run disguised as a server gains nothing that hurts others and is warned.
    "torchrun in a Deployment": Case(workload("apps/v1", "Deployment", _container(
        "trainer", "registry.example/llm:7", ["torchrun", "--nproc_per_node", "8", "main.py"])),
        "inference", "warn", True, priority="inference-standard"),
    # Declarations: honoured with a price where one can be set, lowering nothing elsewhere.
    "smoke-test declared on a 64-GPU StatefulSet": Case(workload("apps/v1", "StatefulSet", _container(
        "trainer", "registry.example/llm:7", ["torchrun", "--nnodes", "8", "--nproc_per_node", "8", "main.py"]),
        labels={"gpuguard.io/workload-class": "smoke-test"}, serviceName="w", replicas=8),
        "inference", "warn", True, warns={"workload-class"}),
    "inference declared on a Job": Case(job(_container("trainer", "registry.example/llm:7", ["python", "x.py"]),
                                            labels={"gpuguard.io/workload-class": "inference"}),
                                        "training", "deny", False, warns={"workload-class"}),
    "smoke-test declared on a Job": Case(job(_container(
        "nccl", "registry.example/nccl-tests:2.23", ["all_reduce_perf", "-b", "8", "-e", "1G"]),
        labels={"gpuguard.io/workload-class": "smoke-test"}, activeDeadlineSeconds=MULTI_DAY),
        "smoke-test", None, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_no_guess_acts_with_force(name: str) -> None:
    case = CASES[name]
    decision = ENGINE.evaluate(case.obj, RequestContext(namespace="team-a", username="alice"))
    assert decision.workload_class == case.workload_class
    found = {v.verdict for v in decision.violations if v.policy == "checkpoint-volume"}
    assert found == ({case.checkpoint} if case.checkpoint else set()), decision.violations
    assert decision.allowed is case.allowed, [v.text for v in decision.denials]
    assert case.warns <= {v.policy for v in decision.warnings}
    if case.deadline is not None:
        assert decision.mutated["spec"]["activeDeadlineSeconds"] == case.deadline
        assert not [c for c in decision.changes if "activeDeadlineSeconds" in c.path]
    if case.priority is not None:
        spec = decision.mutated["spec"] if case.obj["kind"] == "Pod" else decision.mutated["spec"]["template"]["spec"]
        assert spec.get("priorityClassName") == case.priority


def test_a_declared_smoke_test_pays_with_its_deadline() -> None:
    """The declaration is evidence: it drops the checkpoint check and caps the deadline it can no longer need."""
    decision = ENGINE.evaluate(CASES["smoke-test declared on a Job"].obj, RequestContext(namespace="team-a"))
    assert decision.mutated["spec"]["activeDeadlineSeconds"] == 3600
    assert [c.policy for c in decision.changes] == ["job-limits"]


def test_an_update_of_a_running_multi_day_job_keeps_its_deadline() -> None:
    """An UPDATE of a checkpointed 3-day Job that only looks like a smoke test caps nothing either."""
    created = ENGINE.evaluate(CASES["a dmon sidecar beside a checkpointed 3-day run"].obj,
                              RequestContext(namespace="team-a")).mutated
    changed = {**created, "metadata": {**created["metadata"], "labels": {"run": "2"}}}
    changed["spec"] = {**created["spec"], "suspend": True}
    decision = ENGINE.evaluate(changed, RequestContext(operation="UPDATE", namespace="team-a", old_object=created))
    assert decision.allowed
    assert decision.mutated["spec"]["activeDeadlineSeconds"] == MULTI_DAY


def test_a_look_never_buys_preemption_even_where_it_is_granted() -> None:
    """A long-running bare Pod that runs `vllm serve` is judged a server by its look, in a namespace that grants
    inference preemption: it still gets the non-preempting class; a Deployment (a server by its kind) preempts."""
    granting = engine_with("  workload-class: {action: enforce, allowEscalationTo: [inference]}\n")
    server_pod = pod(_container("vllm", "registry.example/serve:1", ["vllm", "serve", "Qwen/Qwen3-8B"], gpus=1))
    decision = granting.evaluate(server_pod, RequestContext(namespace="team-a"))
    assert decision.workload_class == "inference"
    assert decision.mutated["spec"]["priorityClassName"] == "inference-standard"
    deployment = workload("apps/v1", "Deployment", _container("vllm", "registry.example/serve:1", gpus=1))
    by_kind = granting.evaluate(deployment, RequestContext(namespace="team-a"))
    assert by_kind.mutated["spec"]["template"]["spec"]["priorityClassName"] == "inference-critical"
