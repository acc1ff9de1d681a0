"""Findings whose outcome depends on the workload class name the label and the value that would change
it, and checkpoint-volume never offers as the way out a deadline shorter than the work."""

from __future__ import annotations

from gpuguard.webhook.decision import Violation
from gpuguard.webhook.engine.core import Engine
from tests.support.engines import only

LABEL = "gpuguard.io/workload-class"


def _job(chips: int, resource: str = "nvidia.com/gpu", pods: int = 1, deadline: int | None = None) -> dict:
    spec: dict = {"parallelism": pods, "completions": pods, "template": {"metadata": {"labels": {"app": "x"}}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "registry.example/llm:1", "command": ["torchrun", "main.py"],
                        "resources": {"limits": {resource: chips}}}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"}, "spec": spec}


def _finding(engine: Engine, obj: dict, policy: str) -> Violation:
    return next(v for v in engine.evaluate(obj).violations if v.policy == policy)


def test_checkpoint_denial_names_the_classes_that_would_change_it() -> None:
    finding = _finding(only("checkpoint-volume"), _job(1), "checkpoint-volume")
    assert f"judged as training; if it is not, label it {LABEL}: smoke-test" in finding.fix
    assert "batch-inference (evaluation, quantization, batch inference)" in finding.fix


def test_no_deadline_shorter_than_the_work_is_offered_to_a_64_chip_job() -> None:
    # 16 pods x 4 TPU chips: 4 GPU-hours would be a 225 s deadline, shorter than the job's own setup.
    finding = _finding(only("checkpoint-volume"), _job(4, "google.com/tpu", pods=16), "checkpoint-volume")
    assert "activeDeadlineSeconds <=" not in finding.fix
    assert "225" not in finding.fix
    assert f"{LABEL}: smoke-test" in finding.fix


def test_a_deadline_is_offered_only_from_the_floor_up() -> None:
    eight = _finding(only("checkpoint-volume"), _job(8), "checkpoint-volume")
    assert "spec.activeDeadlineSeconds <= 1800 so at most 4 GPU-hours" in eight.fix
    nine = _finding(only("checkpoint-volume"), _job(9), "checkpoint-volume")
    assert "activeDeadlineSeconds <=" not in nine.fix  # 1600 s is below minOfferedDeadlineSeconds (1800)
    lowered = _finding(only("checkpoint-volume", "minOfferedDeadlineSeconds: 600"), _job(9), "checkpoint-volume")
    assert "spec.activeDeadlineSeconds <= 1600" in lowered.fix


def test_the_gpu_hours_bound_itself_still_exempts_short_runs() -> None:
    assert only("checkpoint-volume").evaluate(_job(8, deadline=1800)).allowed
    assert not only("checkpoint-volume").evaluate(_job(8, deadline=1801)).allowed


def test_priority_abuse_names_the_class_that_may_use_the_priority() -> None:
    job = _job(1)
    job["spec"]["template"]["spec"]["priorityClassName"] = "inference-critical"
    finding = _finding(only("priority-abuse"), job, "priority-abuse")
    assert f"label it {LABEL}: inference (where this namespace's profile grants it)" in finding.fix


def _vllm_statefulset(**pod: object) -> dict:
    container = {"name": "server", "image": "vllm/vllm-openai:v0.9.1", "command": ["vllm", "serve", "m"],
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s", "namespace": "ml"},
            "spec": {"replicas": 1, "serviceName": "s", "selector": {"matchLabels": {"app": "x"}},
                     "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container], **pod}}}}


def test_inference_on_spot_names_the_batch_class() -> None:
    served = _vllm_statefulset(nodeSelector={"cloud.google.com/gke-spot": "true"})
    finding = _finding(only("inference-on-spot"), served, "inference-on-spot")
    assert f"judged as inference; if it is not, label it {LABEL}: batch-inference" in finding.fix


def test_workload_class_warning_says_what_asked_for_the_class() -> None:
    finding = _finding(only("workload-class"), _vllm_statefulset(), "workload-class")
    assert "it asks for 'inference' (runs `vllm serve` in container 'server')" in finding.message
    assert f"label it {LABEL}: batch-inference, smoke-test or training" in finding.fix
