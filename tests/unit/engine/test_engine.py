"""The engine's contract: decisions, patches that apply, idempotency, malformed input."""

from __future__ import annotations

import copy

import pytest

from gpuguard.webhook.config import load_config, parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from tests.support.builders import ALL_KINDS, bare_pod_spec, cpu_container, make, pvc_pod_spec, template_specs
from tests.support.engines import assert_patch_yields_mutated

ENGINE = Engine(load_config())


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_every_kind_gpu_workload_is_mutated_patch_applies_and_is_idempotent(kind):
    obj = make(kind, pvc_pod_spec(), replicas=1)
    first = ENGINE.evaluate(obj)
    assert first.error is None and first.skipped is None
    assert first.patch, f"{kind}: expected a mutation"
    assert_patch_yields_mutated(first)
    for spec in template_specs(first.mutated):
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["priorityClassName"]
    assert first.mutated["metadata"]["annotations"][MUTATED_BY_ANNOTATION]
    second = ENGINE.evaluate(first.mutated)
    assert second.patch == [], f"{kind}: second evaluation must not change anything"
    assert second.mutated == first.mutated


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_non_gpu_workloads_pass_untouched_by_default(kind):
    obj = make(kind, {"containers": [cpu_container()]})
    decision = ENGINE.evaluate(obj)
    assert decision.allowed and decision.patch == [] and decision.violations == []
    assert decision.gpus == 0


def test_input_object_is_never_modified():
    obj = make("Job", bare_pod_spec())
    before = copy.deepcopy(obj)
    ENGINE.evaluate(obj)
    assert obj == before


def test_unknown_kind_is_skipped_untouched():
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    decision = ENGINE.evaluate(obj)
    assert decision.allowed and decision.skipped and decision.patch == []


def test_same_kind_name_other_group_is_unknown():
    """Not batch's Job: an unknown kind, found by structure and reported (it asks for a GPU), never judged as a
    batch Job nor passed in silence."""
    obj = make("Job", bare_pod_spec())
    obj["apiVersion"] = "example.com/v1"
    decision = ENGINE.evaluate(obj)
    assert decision.skipped is None and not decision.allowed
    assert "unknown kind Job (example.com/v1) with 1 accelerator" in (decision.error or "")


def test_gpu_counts_per_workload_multiply_replicas():
    obj = make("PyTorchJob", pvc_pod_spec(gpus=4), replicas=3)
    decision = ENGINE.evaluate(obj)
    assert decision.gpus == 4 * (1 + 3)
    assert decision.gpus_by_resource == {"nvidia.com/gpu": 16}


def test_limits_alone_imply_requests_and_requests_alone_count():
    spec = bare_pod_spec()
    spec["containers"][0]["resources"] = {"requests": {"amd.com/gpu": "2"}}
    decision = ENGINE.evaluate(make("Pod", spec))
    assert decision.gpus == 2


def test_mig_and_other_vendors_count_as_gpus():
    spec = bare_pod_spec()
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 1, "habana.ai/gaudi": 2}}
    assert ENGINE.evaluate(make("Pod", spec)).gpus == 3


@pytest.mark.parametrize("obj", [
    None, 42, "text", [], {"kind": "Job"}, {"apiVersion": "batch/v1", "kind": "Job", "spec": None},
    {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": None}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [None, 3, "x"]}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [
        {"name": "t", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {"containers": [
        {"name": "t", "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": "x"}}],
        "tolerations": "nope", "affinity": [], "volumes": {"a": 1}}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": "x", "spec": {"template": {"spec": {"containers": [
        {"name": 5, "resources": {"limits": {"nvidia.com/gpu": True}}, "env": "x", "volumeMounts": [1]}]}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"annotations": []}, "spec": {"parallelism": "2",
     "template": {"metadata": [], "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": [1, 2]}},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Worker": None}}},
    {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "spec": {"replicatedJobs": {"x": 1}}},
    {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {"workerGroupSpecs": [None, {"template": 1}]}},
    {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "spec": {"predictor": []}},
])
def test_malformed_objects_never_raise_and_patches_still_apply(obj):
    decision = ENGINE.evaluate(obj)
    assert decision.error is None or not decision.allowed  # what can't be judged is refused by default
    if decision.patch:
        assert_patch_yields_mutated(decision)


def test_unserializable_object_is_an_error_handled_by_failure_mode():
    obj = make("Job", bare_pod_spec())
    obj["spec"]["weird"] = object()
    opened = Engine(parse_config_text("kind: GpuguardConfig\nfailureMode: open\n"))
    open_decision = opened.evaluate(obj)
    assert open_decision.error and open_decision.allowed
    closed_decision = ENGINE.evaluate(obj)  # the shipped default: closed
    assert closed_decision.error and not closed_decision.allowed


def test_policy_crash_is_contained_and_follows_failure_mode(monkeypatch):
    from gpuguard.policies import REGISTRY

    def boom(view, settings):
        raise RuntimeError("bug")

    policy = REGISTRY["gpu-tolerations"]
    monkeypatch.setattr(type(policy), "run", property(lambda self: boom), raising=False)
    engine = Engine(parse_config_text("kind: GpuguardConfig\nfailureMode: closed\n"))
    decision = engine.evaluate(make("Job", pvc_pod_spec()))
    assert decision.error is not None and decision.error.startswith(
        "its policies could not be evaluated (RuntimeError)")
    assert not decision.allowed


def test_yaml_dates_do_not_produce_spurious_patches():
    import datetime

    obj = make("Deployment", {"containers": [cpu_container()]})
    obj["metadata"]["labels"] = {"built": datetime.date(2024, 1, 1)}
    assert ENGINE.evaluate(obj).patch == []


def test_mutation_on_create_and_update_nothing_on_delete():
    obj = make("Job", bare_pod_spec())
    update = ENGINE.evaluate(obj, RequestContext(operation="UPDATE", old_object=None))
    assert "gpu-tolerations" in update.mutated_by and not update.allowed
    assert_patch_yields_mutated(update)
    delete = ENGINE.evaluate(obj, RequestContext(operation="DELETE"))
    assert delete.patch == [] and delete.allowed and delete.violations == []


def test_update_denies_only_what_the_update_changes():
    old = make("Job", bare_pod_spec())  # already violates checkpoint-volume
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"touched": "yes"}
    decision = ENGINE.evaluate(new, RequestContext(operation="UPDATE", old_object=old, mutate=False))
    assert decision.allowed and decision.violations == []
    worse = copy.deepcopy(old)
    worse["spec"]["template"]["spec"]["priorityClassName"] = "inference-critical"
    decision = ENGINE.evaluate(worse, RequestContext(operation="UPDATE", old_object=old, mutate=False))
    assert not decision.allowed
    assert [v.policy for v in decision.denials] == ["priority-abuse"]


def test_validate_only_context_sees_object_as_is():
    decision = ENGINE.evaluate(make("Job", bare_pod_spec()), RequestContext(mutate=False))
    assert decision.patch == []
    assert {v.policy for v in decision.denials} == {"checkpoint-volume", "gpu-memory-guard"}


def test_result_entry_follows_the_audit_contract():
    decision = ENGINE.evaluate(make("Job", bare_pod_spec()))
    entry = decision.result_entry("jobs.yaml", 0)
    for key in ("source", "index", "apiVersion", "kind", "namespace", "name", "allowed", "violations", "patch"):
        assert key in entry
    violation = entry["violations"][0]
    assert set(violation) >= {"policy", "action", "message", "path"}
    assert violation["action"] in ("deny", "warn", "audit")


def test_message_names_policy_path_container_and_fix():
    decision = ENGINE.evaluate(make("Job", bare_pod_spec()))
    text = next(v.text for v in decision.violations if v.policy == "checkpoint-volume")
    assert text == ("[checkpoint-volume] spec.template.spec.containers[0] (trainer): GPU training job has no "
                    "persistent volume for checkpoints; mount a persistentVolumeClaim (e.g. at /checkpoints) or "
                    "set CHECKPOINT_URI to an object store; or, for a short run, set spec.activeDeadlineSeconds "
                    "<= 14400 so at most 4 GPU-hours are at risk; if it is not training, label it "
                    "gpuguard.io/workload-class: smoke-test or batch-inference (deadline capped).")


def test_owner_reference_alone_grants_nothing():
    pod = make("Pod", bare_pod_spec(9))
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u",
                                           "controller": True}]
    decision = ENGINE.evaluate(pod, RequestContext(username="alice"))
    assert not decision.allowed and "gpu-tolerations" in decision.mutated_by


def test_pod_created_from_mutated_job_template_gets_no_second_mutation():
    job = ENGINE.evaluate(make("Job", pvc_pod_spec())).mutated
    template = job["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**template["metadata"], "name": "w-abc", "namespace": "ml",
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "w", "uid": "u",
                                             "controller": True}]},
           "spec": copy.deepcopy(template["spec"])}
    from_controller = ENGINE.evaluate(pod, RequestContext(username="system:serviceaccount:kube-system:job-controller"))
    assert from_controller.patch == [] and from_controller.skipped
    # The same pod from a user is idempotent for every policy but the pod-level deadline.
    assert {op["path"] for op in ENGINE.evaluate(pod).patch} == {"/metadata/annotations",
                                                                "/spec/activeDeadlineSeconds"}


def test_plain_json_mode_gives_the_same_decision_without_touching_input():
    import orjson

    obj = orjson.loads(orjson.dumps(make("PyTorchJob", bare_pod_spec(), replicas=3)))
    before = copy.deepcopy(obj)
    fast = ENGINE.evaluate(obj, plain_json=True)
    slow = ENGINE.evaluate(obj)
    assert obj == before
    assert fast.patch == slow.patch and fast.mutated == slow.mutated and fast.violations == slow.violations
    assert_patch_yields_mutated(fast)
