"""Classes follow the work: a table of workloads written as their projects' samples write them, and the
class each asks for (``gpuguard.workloads.classify``), then the engine's use of it (a declaration still
wins, privilege still comes from the namespace)."""

from __future__ import annotations

import pytest

from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads import kinds
from gpuguard.workloads.classify import MAX_TEXT, infer, relabel
from tests.support.builders import container
from tests.support.engines import engine_with

GPU = {"limits": {"nvidia.com/gpu": 8}}
TPU = {"limits": {"google.com/tpu": 4}}


def _c(image: str, command: list[str] | None = None, args: list[str] | None = None, resources: dict | None = None,
       name: str = "main", **extra) -> dict:
    return container(image, command, args, resources or GPU, name, **extra)


def _pod(*containers: dict, **spec) -> dict:
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": list(containers), **spec}}


def job(*containers: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": _pod(*containers, restartPolicy="Never")}}


def deployment(*containers: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": _pod(*containers)}}


def statefulset(*containers: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"},
            "spec": {"replicas": 1, "serviceName": "s", "selector": {"matchLabels": {"app": "x"}},
                     "template": _pod(*containers)}}


RAY_HEAD_PORTS = [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"},
                  {"containerPort": 10001, "name": "client"}]


def raycluster(image: str) -> dict:
    head = _c(image, resources={"limits": {"cpu": "8"}}, name="ray-head", ports=RAY_HEAD_PORTS)
    worker = _c(image, name="ray-worker")
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": _pod(head)},
                     "workerGroupSpecs": [{"groupName": "gpu", "replicas": 4, "rayStartParams": {},
                                           "template": _pod(worker)}]}}


def rayjob(entrypoint: str, image: str = "rayproject/ray:2.46.0-gpu") -> dict:
    cluster = raycluster(image)["spec"]
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"},
            "spec": {"entrypoint": entrypoint, "rayClusterSpec": cluster}}


def pytorchjob(*containers: dict) -> dict:
    role = {"replicas": 2, "restartPolicy": "OnFailure", "template": _pod(*containers)}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
            "spec": {"pytorchReplicaSpecs": {"Master": dict(role, replicas=1), "Worker": role}}}


VLLM = _c("vllm/vllm-openai:v0.9.1", command=["vllm", "serve"],
          args=["meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "8", "--quantization", "awq"],
          ports=[{"containerPort": 8000, "name": "http"}])
TPU_SMOKE = _c("python:3.11", command=["bash", "-c"], resources=TPU,
               args=["pip install 'jax[tpu]' -f https://storage.googleapis.com/jax-releases/libtpu_releases.html "
                     "&& python -c 'import jax; print(\"TPU cores:\", jax.device_count())'"])

CASES = {
    "verl RL training on a RayCluster (image)": (raycluster("verlai/verl:app-verl0.4-vllm0.8.5-mcore0.12.1"),
                                                 "training"),
    "a plain RayCluster: its kind": (raycluster("rayproject/ray:2.46.0-gpu"), "inference"),
    "Jupyter StatefulSet (image, port 8888)": (
        statefulset(_c("quay.io/jupyter/pytorch-notebook:cuda12-2025-06-02",
                       ports=[{"containerPort": 8888, "name": "notebook-port"}])), "notebook"),
    "Jupyter StatefulSet with its own image (command)": (
        statefulset(_c("registry.example/ds/gpu-env:3", command=["jupyter", "lab", "--ip=0.0.0.0"])), "notebook"),
    "GPTQ quantization Job (llmcompressor)": (
        job(_c("ghcr.io/example/quant:1", command=["python", "-c"],
               args=["from llmcompressor import oneshot; oneshot(model=m, recipe=GPTQModifier(scheme='W4A16'))"])),
        "batch-inference"),
    "GPTQ quantization Job (script name)": (
        job(_c("nvcr.io/nvidia/pytorch:25.01-py3", command=["python", "/app/quantize_gptq.py"])), "batch-inference"),
    "TPU smoke test Job (pip install, then jax.device_count())": (job(TPU_SMOKE), "smoke-test"),
    "NCCL all-reduce test": (job(_c("ghcr.io/coreweave/nccl-tests:12.4", command=["all_reduce_perf", "-b", "8"])),
                             "smoke-test"),
    "nvidia-smi before a training script: training": (
        job(_c("ghcr.io/example/x:1", command=["sh", "-c", "nvidia-smi && python train.py --epochs 3"])),
        "training"),
    "batch-inference RayJob (entrypoint)": (rayjob("python /home/ray/samples/batch_inference.py --model x"),
                                            "batch-inference"),
    "RayJob with vLLM's run-batch": (rayjob("vllm run-batch -i in.jsonl -o out.jsonl --model m"),
                                     "batch-inference"),
    "verl RayJob": (rayjob("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name=vllm"), "training"),
    "vLLM Deployment (command)": (deployment(VLLM), "inference"),
    "vLLM Deployment (image and args only)": (
        deployment(_c("vllm/vllm-openai:latest", args=["--model", "Qwen/Qwen2.5-7B-Instruct-SFT"])), "inference"),
    "Triton Deployment": (deployment(_c("nvcr.io/nvidia/tritonserver:25.01-py3",
                                        command=["tritonserver", "--model-repository=/models"])), "inference"),
    "TGI on a StatefulSet": (statefulset(_c("ghcr.io/huggingface/text-generation-inference:3.0",
                                            args=["--model-id", "m"])), "inference"),
    "custom server: readiness probe over HTTP": (
        statefulset(_c("registry.example/app:1", readinessProbe={"httpGet": {"path": "/health", "port": 8080}})),
        "inference"),
    "torchrun PyTorchJob": (pytorchjob(_c("registry.example/llm:2", command=["torchrun", "--nproc_per_node=8",
                                                                              "main.py"])), "training"),
    "accelerate launch of lm-eval: evaluation": (
        job(_c("registry.example/eval:1", command=["accelerate", "launch", "-m", "lm_eval", "--model", "hf"])),
        "batch-inference"),
    "lm-eval Job": (job(_c("registry.example/eval:1", command=["lm_eval"], args=["--model", "vllm", "--tasks",
                                                                                "mmlu"])), "batch-inference"),
    "torchtune eval recipe": (job(_c("registry.example/tt:1", command=["tune", "run", "eleuther_eval", "--config",
                                                                      "eval.yaml"])), "batch-inference"),
    "torchtune fine-tuning Deployment: training": (
        deployment(_c("registry.example/tt:1", command=["tune", "run", "--nproc_per_node", "8",
                                                        "full_finetune_distributed", "--config", "c.yaml"])),
        "training"),
    "training StatefulSet (pytorch image, no server)": (statefulset(_c("pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime",
                                                                       command=["python", "run.py"])), "training"),
    "Job with nothing to go on: its kind": (job(_c("registry.example/x:1")), "training"),
    "KServe InferenceService: its operator": (
        {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": "i"},
         "spec": {"predictor": {"containers": [_c("registry.example/x:1", command=["python", "train.py"])]}}},
        "inference"),
    "training sidecar beside a server: the most checks win": (
        deployment(VLLM, _c("registry.example/x:1", name="learner", command=["torchrun", "learn.py"])), "training"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_class_follows_the_work(name: str) -> None:
    obj, expected = CASES[name]
    kind = kinds.lookup(obj["apiVersion"], obj["kind"])
    assert kind is not None
    inferred = infer(obj, kind, kind.default_class)
    assert inferred.workload_class == expected, inferred.reason
    assert inferred.reason


def test_reason_names_the_evidence() -> None:
    kind = kinds.lookup("apps/v1", "Deployment")
    assert kind is not None
    assert "vllm serve" in infer(deployment(VLLM), kind, "inference").reason
    assert infer(job(_c("registry.example/x:1")), kinds.lookup("batch/v1", "Job"), "training").by_kind  # type: ignore[arg-type]


def test_malformed_and_huge_objects_are_read_in_bounds() -> None:
    kind = kinds.lookup("batch/v1", "Job")
    assert kind is not None
    bad = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [
        None, {"command": "torchrun"}, {"args": [1, None, {"x": 1}], "image": 7, "ports": "x"}]}}}}
    assert infer(bad, kind, "training").workload_class == "training"
    # A training launcher beyond MAX_TEXT characters of a command line is not read.
    long = job(_c("registry.example/x:1", command=["sh", "-c", "echo " + "x" * MAX_TEXT + " && torchrun a.py"]))
    assert infer(long, kind, "notebook").by_kind


def test_relabel_names_the_label_and_values() -> None:
    assert relabel("training", (("smoke-test", "a smoke test"), ("batch-inference", ""))) == \
        "judged as training; if it is not, label it gpuguard.io/workload-class: smoke-test (a smoke test) or " \
        "batch-inference"


GRANTING = """  workload-class: {action: enforce, allowEscalationTo: [inference, notebook]}
"""


def _class(engine: Engine, obj: dict) -> str | None:
    obj = dict(obj, metadata=dict(obj["metadata"], namespace="ml"))
    return engine.evaluate(obj).workload_class


def test_the_engine_judges_by_the_kind_and_lets_the_work_choose_among_equals() -> None:
    """A long-running kind is a server or a notebook whatever is granted (the look of the work chooses between
    the two, which have the same checks); a run to completion stays training whatever it looks like."""
    granted, plain = engine_with(GRANTING), engine_with()
    jupyter = statefulset(_c("jupyter/base-notebook:2024", ports=[{"containerPort": 8888}]))
    assert _class(granted, jupyter) == _class(plain, jupyter) == "notebook"
    verl = raycluster("verlai/verl:app-verl0.4")
    assert _class(granted, verl) == "inference"  # a RayCluster is long-running: its RL look only warns
    assert _class(plain, job(TPU_SMOKE)) == "training"  # a smoke test's look drops nothing: declare it


def test_a_declaration_still_wins() -> None:
    declared = job(TPU_SMOKE)
    declared["metadata"]["labels"] = {"gpuguard.io/workload-class": "training"}
    assert _class(engine_with(), declared) == "training"


def test_every_pattern_has_a_literal_guard() -> None:
    from gpuguard.workloads import classify
    for rung in (classify._TOOLS, classify._LAUNCHERS, classify._SMOKE, classify._IMAGES, classify._BASE_IMAGES):
        for _, entries in rung:
            for literal, pattern in entries:
                assert len(literal) >= 3, pattern.pattern


def test_guard_is_the_required_literal() -> None:
    from gpuguard.workloads.classify import guard
    assert guard(r"\blm[_-]eval\b") == "eval"
    assert guard(r"llama-?factory") == "factory"
    assert guard(r"vllm\.entrypoints\.(?:openai\.)?api_server") == "vllm.entrypoints."
    assert guard(r"device_count\(\)") == "device_count()"
    assert guard(r"notebook-servers?/") == "notebook-server"
    assert guard(r"a-long-one|b") == ""  # alternatives at the top level need separate patterns
