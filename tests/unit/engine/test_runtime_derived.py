"""A TrainJob is judged with its runtime at apply, and its JobSet again when the Trainer creates it.

The runtime is another object, which its owner may create or change after the TrainJob was
admitted (or within a lookup cache's lifetime): the JobSet the Trainer builds from it is the
first object holding the pod templates that will run, so it is judged in full then.
"""

from __future__ import annotations

import copy

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.objects import StaticLookup
from gpuguard.workloads.kinds import trainer
from tests.support.builders import make, pvc_pod_spec, runtime_for

ENGINE = Engine(load_config())
TRAINER_USER = trainer.TRAINER.users[0]


def trainjob(nodes: int) -> dict:
    return make("TrainJob", pvc_pod_spec(gpus=8), replicas=nodes)


def jobset_made_by_trainer(job: dict, runtime: dict) -> dict:
    """The JobSet as the Trainer creates it: built from the runtime *now*, owned by the TrainJob."""
    made = copy.deepcopy(trainer.TRAINJOB.runtime.expand(job, runtime))
    made["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                            "name": job["metadata"]["name"], "uid": "u-1", "controller": True}]
    return made


def test_a_runtime_changed_after_its_trainjob_was_admitted_is_caught_on_the_jobset():
    job = trainjob(nodes=1)
    small = runtime_for("TrainJob", pvc_pod_spec(gpus=8))
    admitted = ENGINE.evaluate(job, RequestContext(namespace="ml", read_object=StaticLookup([small])))
    assert admitted.allowed and admitted.gpus == 8

    # The tenant then makes the runtime ask 64 GPUs per node (over the 8-per-node cap).
    big = runtime_for("TrainJob", pvc_pod_spec(gpus=64))
    jobset = jobset_made_by_trainer(job, big)
    decision = ENGINE.evaluate(jobset, RequestContext(namespace="ml", username=TRAINER_USER))
    assert decision.skipped is None and not decision.allowed
    assert "gpu-request-shape" in {v.policy for v in decision.denials}
    assert decision.workload_class == "training"


def test_a_runtime_created_after_its_trainjob_is_caught_on_the_jobset():
    job = trainjob(nodes=1)
    refused = ENGINE.evaluate(job, RequestContext(namespace="ml", read_object=StaticLookup([])))
    assert not refused.allowed and refused.error and "not found" in refused.error
    # Even if the TrainJob got in (failureMode open, or created while the runtime existed), the
    # JobSet built from a runtime created later is judged when the Trainer creates it.
    late = runtime_for("TrainJob", pvc_pod_spec(gpus=64))
    decision = ENGINE.evaluate(jobset_made_by_trainer(job, late),
                               RequestContext(namespace="ml", username=TRAINER_USER))
    assert not decision.allowed and decision.denials


def test_the_trainers_jobset_from_an_unchanged_runtime_is_admitted_and_mutated():
    job = trainjob(nodes=1)
    runtime = runtime_for("TrainJob", pvc_pod_spec(gpus=8))
    decision = ENGINE.evaluate(jobset_made_by_trainer(job, runtime),
                               RequestContext(namespace="ml", username=TRAINER_USER))
    assert decision.allowed and decision.patch and decision.gpus == 8


def test_a_user_cannot_pass_a_jobset_off_as_the_trainers():
    job = trainjob(nodes=1)
    jobset = jobset_made_by_trainer(job, runtime_for("TrainJob", pvc_pod_spec(gpus=64)))
    decision = ENGINE.evaluate(jobset, RequestContext(namespace="ml", username="alice"))
    assert not decision.allowed and decision.skipped is None
