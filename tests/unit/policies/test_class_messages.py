"""Findings whose outcome depends on the workload class name the label and the value that would change
it, and checkpoint-volume never offers as the way out a deadline shorter than the work."""

from __future__ import annotations

from gpuguard.policies import REGISTRY
from gpuguard.webhook.decision import Violation
from gpuguard.webhook.engine.core import Engine
from tests.support.engines import engine_with, only

LABEL = "gpuguard.io/workload-class"


def _job(chips: int, resource: str = "nvidia.com/gpu", pods: int = 1, deadline: int | None = None) -> dict:
    spec: dict = {"parallelism": pods, "completions": pods, "template": {"metadata": {"labels": {"app": "x"}}, "spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "registry.example/llm:1", "command": ["torchrun", "main.py"],
                        "resources": {"limits": {resource: chips}}}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "ml"}, "spec": spec}


def _these(*policies: str) -> Engine:
    """Only ``policies`` on (workload-class among them: no namespace grant, as on a fresh install)."""
    return engine_with("\n".join(f"  {pid}: {{action: {'enforce' if pid in policies else 'off'}}}"
                                 for pid in REGISTRY) + "\n")


def _finding(engine: Engine, obj: dict, policy: str) -> Violation:
    return next(v for v in engine.evaluate(obj).violations if v.policy == policy)


def test_checkpoint_denial_names_the_classes_that_would_change_it() -> None:
    finding = _finding(only("checkpoint-volume"), _job(1), "checkpoint-volume")
    assert f"if it is not training, label it {LABEL}: smoke-test or batch-inference (deadline capped)" in finding.fix


def test_a_guess_shapes_the_checkpoint_message_but_never_drops_the_check() -> None:
    """An evaluation tool before the training command, or alone: still training by its kind (a Job), so still
    denied; where the work looks like batch work the message offers that class first."""
    mixed = _job(2)
    mixed["spec"]["template"]["spec"]["containers"][0]["command"] = [
        "sh", "-c", "lm_eval --tasks x --model hf; torchrun --nnodes 4 train.py"]
    assert _finding(only("checkpoint-volume"), mixed, "checkpoint-volume").verdict == "deny"
    evaluation = _job(2)
    evaluation["spec"]["template"]["spec"]["containers"][0]["command"] = ["lm_eval", "--tasks", "mmlu"]
    finding = _finding(only("checkpoint-volume"), evaluation, "checkpoint-volume")
    assert finding.verdict == "deny"
    assert "it looks like batch work (runs `lm_eval`" in finding.fix
    assert f"label it {LABEL}: batch-inference or smoke-test (deadline capped)" in finding.fix


def test_no_deadline_shorter_than_the_work_is_offered_to_a_64_chip_job() -> None:
    # 16 pods x 4 TPU chips: 4 GPU-hours would be a 225 s deadline, shorter than the job's own setup.
    finding = _finding(only("checkpoint-volume"), _job(4, "google.com/tpu", pods=16), "checkpoint-volume")
    assert "activeDeadlineSeconds <=" not in finding.fix
    assert "225" not in finding.fix
    assert f"{LABEL}: smoke-test or batch-inference" in finding.fix


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


def test_a_server_without_the_grant_may_not_preempt_by_naming_the_class() -> None:
    served = _vllm_statefulset(priorityClassName="inference-critical")
    finding = _finding(_these("priority-abuse", "workload-class"), served, "priority-abuse")
    assert finding.verdict == "deny" and "this namespace does not grant preemption" in finding.message


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


def test_a_server_is_judged_as_a_server_without_any_grant() -> None:
    decision = _these("workload-class", "checkpoint-volume").evaluate(_vllm_statefulset())
    assert decision.allowed and decision.workload_class == "inference" and not decision.violations


def test_a_declaration_that_lowers_nothing_says_so() -> None:
    served = _vllm_statefulset()
    served["metadata"]["labels"] = {LABEL: "smoke-test"}
    finding = _finding(only("workload-class"), served, "workload-class")
    assert finding.verdict == "warn"
    assert "a StatefulSet has no deadline to bound what it loses, so declaring 'smoke-test' lowers no check" \
        in finding.message
