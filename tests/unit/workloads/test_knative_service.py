"""Knative Serving's Service: its pods as far as the autoscaler may go, judged as a server, gated fields left out."""

from __future__ import annotations

import pytest

from gpuguard.webhook.decision import RequestContext
from tests.support.builders import container
from tests.support.engines import engine_with

CREATE = RequestContext(operation="CREATE", namespace="serving", mutate=True, validate=True)


def service(annotations: dict | None, gpus: int = 1) -> dict:
    template: dict = {"spec": {"containers": [container("ghcr.io/example/asr:3", ["python", "-m", "asr.serve"],
                                                       resources={"limits": {"nvidia.com/gpu": gpus}})]}}
    if annotations is not None:
        template["metadata"] = {"annotations": annotations}
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": "asr", "namespace": "serving"}, "spec": {"template": template}}


@pytest.mark.parametrize(("annotations", "pods"), [
    (None, 1),
    ({"autoscaling.knative.dev/max-scale": "5"}, 5),
    ({"autoscaling.knative.dev/maxScale": "3"}, 3),  # the older spelling Knative still reads
    ({"autoscaling.knative.dev/min-scale": "2", "autoscaling.knative.dev/max-scale": "6"}, 6),
    ({"autoscaling.knative.dev/min-scale": "4"}, 4),
    ({"autoscaling.knative.dev/max-scale": "lots"}, 1),  # unreadable: the certain minimum
])
def test_its_accelerators_are_counted_up_to_the_autoscalers_bound(annotations, pods):
    decision = engine_with().evaluate(service(annotations, gpus=2), CREATE)
    assert decision.gpus == 2 * pods


def test_it_is_a_server_whatever_it_runs_and_gets_no_field_knative_refuses():
    obj = service(None)
    obj["spec"]["template"]["spec"]["containers"][0]["command"] = ["torchrun", "train.py"]  # looks like training
    decision = engine_with().evaluate(obj, CREATE)
    assert decision.allowed and decision.workload_class == "inference"  # the kind is a server: no checkpoint check
    pod = decision.mutated["spec"]["template"]["spec"]
    assert "tolerations" not in pod and "priorityClassName" not in pod and "affinity" not in pod
    assert pod["containers"][0]["resources"]["limits"]["memory"]
    warned = {v.policy for v in decision.warnings}
    assert {"gpu-tolerations", "priority-class"} <= warned


def test_fields_the_cluster_enables_in_knative_are_set():
    engine = engine_with(extra="kserve:\n  knativeFeatures: [kubernetes.podspec-tolerations]\n")
    pod = engine.evaluate(service(None), CREATE).mutated["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "priorityClassName" not in pod
