"""The ``scale`` subresource: recast as an UPDATE of the workload, judged by the same caps."""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.server.envelope import AdmissionRequest
from gpuguard.webhook.server.scale import ScaleError, as_workload_update, scalable_kind
from gpuguard.workloads.kinds import KINDS
from gpuguard.workloads.paths import get_path
from tests.support.builders import make, pvc_pod_spec

ENGINE = Engine(load_config())


def scale_request(resource: str, group: str, replicas, name: str = "w") -> AdmissionRequest:
    return AdmissionRequest.model_validate({
        "uid": "u-1", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": group, "version": "v1", "resource": resource}, "subResource": "scale",
        "name": name, "namespace": "ml", "operation": "UPDATE", "userInfo": {"username": "alice"},
        "object": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}},
        "oldObject": {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 1}},
    })


def ganged(kind: str, replicas: int) -> dict:
    """A GPU workload that gangs where it must (a Kueue queue), as gpuguard stored it."""
    obj = make(kind, pvc_pod_spec(8), replicas=replicas)
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}
    return ENGINE.evaluate(obj).mutated


SCALABLE = [k for k in KINDS if k.scale_replicas]


def test_the_scalable_kinds_come_from_the_kind_table():
    # KubeAI's Model declares a scale subresource: `kubectl scale model --replicas=100` is judged too.
    assert {k.kind for k in SCALABLE} >= {"Deployment", "StatefulSet", "ReplicaSet", "LeaderWorkerSet", "PyTorchJob",
                                          "Model"}


@pytest.mark.parametrize("kind", SCALABLE, ids=lambda k: k.kind)
def test_scaling_past_the_gpu_total_is_a_new_finding(kind):
    stored = ganged(kind.kind, 1)
    req = scale_request(kind.plural, kind.group, 9)  # 9 x 8 GPUs > 64
    assert scalable_kind(req) is kind
    update = as_workload_update(req, kind, stored)
    assert update.operation == "UPDATE" and update.kind.kind == kind.kind and update.sub_resource is None
    ctx = RequestContext(operation="UPDATE", old_object=update.old_object, mutate=False, namespace="ml")
    decision = ENGINE.evaluate(update.object, ctx)
    assert [v.policy for v in decision.denials] == ["gpu-request-shape"]
    within = as_workload_update(scale_request(kind.plural, kind.group, 1), kind, stored)
    assert ENGINE.evaluate(within.object, ctx).allowed


def test_scale_of_unknown_or_unscalable_kinds_is_not_judged():
    assert scalable_kind(scale_request("jobs", "batch", 3)) is None
    assert scalable_kind(scale_request("widgets", "example.com", 3)) is None


@pytest.mark.parametrize("replicas", [-1, "3", None, True])
def test_malformed_scale_is_a_scale_error(replicas):
    kind = next(k for k in KINDS if k.kind == "Deployment")
    with pytest.raises(ScaleError, match="spec.replicas"):
        as_workload_update(scale_request("deployments", "apps", replicas), kind, make("Deployment", pvc_pod_spec()))


@pytest.mark.parametrize("kind", SCALABLE, ids=lambda k: k.kind)
def test_a_workload_already_over_its_cap_may_shrink_or_change_but_never_grow(kind):
    """Created before install (or before the cap was lowered): its old finding has the same subject, so sizes decide."""
    stored = ganged(kind.kind, 10)  # 10 pods x 8 GPUs (80; a PyTorchJob's master adds 8) > 64
    assert ENGINE.evaluate(stored, RequestContext(namespace="ml")).gpus >= 80
    now = get_path(stored, kind.scale_replicas)
    now = now if isinstance(now, int) else 1
    ctx = RequestContext(operation="UPDATE", old_object=stored, mutate=False, namespace="ml")
    up = as_workload_update(scale_request(kind.plural, kind.group, now + 1), kind, stored)
    denied = ENGINE.evaluate(up.object, ctx)
    assert [v.policy for v in denied.denials] == ["gpu-request-shape"] and "in all" in denied.denials[0].message
    down = as_workload_update(scale_request(kind.plural, kind.group, now - 1), kind, stored)
    assert ENGINE.evaluate(down.object, ctx).allowed
    same = as_workload_update(scale_request(kind.plural, kind.group, now), kind, stored)
    assert ENGINE.evaluate(same.object, ctx).allowed
    relabelled = dict(stored, metadata={**stored["metadata"], "labels": {**stored["metadata"]["labels"], "a": "b"}})
    assert ENGINE.evaluate(relabelled, ctx).allowed


# -- kinds whose scale the cluster's CRD declares ------------------------------------------------------------------
def test_every_custom_resource_kind_is_in_the_scale_rule():
    """A rule for a subresource a CRD lacks never matches; one missing for a CRD that has it lets `kubectl scale`
    through unjudged (KubeAI's Model, Kubeflow's TFJob): every custom resource kind is covered."""
    from gpuguard.webhook.cli.webhook_config import scale_rules

    covered = {(g, r.removesuffix("/scale")) for rule in scale_rules() for g in rule["apiGroups"]
               for r in rule["resources"]}
    custom = {(k.group, k.plural) for k in KINDS if not k.validated_by_apiserver}
    assert custom and custom <= covered
    assert ("batch", "jobs") not in covered and ("", "pods") not in covered  # no Scale: never asked for


@pytest.mark.parametrize("path, expected", [(".spec.replicas", ("spec", "replicas")),
                                            (".spec.tfReplicaSpecs.Worker.replicas",
                                             ("spec", "tfReplicaSpecs", "Worker", "replicas"))])
def test_a_crds_replicas_path_is_read_as_a_path(path, expected):
    from gpuguard.webhook.server.scale import replicas_path

    assert replicas_path(path) == expected


@pytest.mark.parametrize("path", [None, "", "spec.replicas", ".status.replicas", ".spec.workers[0].replicas",
                                  ".spec..replicas"])
def test_a_replicas_path_that_is_not_a_plain_path_under_spec_is_a_scale_error(path):
    from gpuguard.webhook.server.scale import replicas_path

    with pytest.raises(ScaleError):
        replicas_path(path)


def _tfjob_crd(scale: dict | None) -> dict:
    version = {"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}}
    if scale is not None:
        version["subresources"]["scale"] = scale
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "tfjobs.kubeflow.org"}, "spec": {"group": "kubeflow.org", "versions": [version]}}


def test_the_server_reads_where_a_scale_lands_from_the_crd_once(tmp_path):
    import json

    from gpuguard.webhook.server.scale import WorkloadReader
    from tests.support.fake_apiserver import serve

    crd = _tfjob_crd({"specReplicasPath": ".spec.tfReplicaSpecs.Worker.replicas"})
    with serve(lambda call: (200, crd)) as (server, api):
        kubeconfig = tmp_path / "kubeconfig"
        host = api.configuration.host
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": host}}], "users": [{"name": "t", "user": {"token": "t"}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
        reader = WorkloadReader(str(kubeconfig))
        tfjob = next(k for k in KINDS if k.kind == "TFJob")
        assert tfjob.scale_replicas is None and tfjob.scalable
        req = scale_request("tfjobs", "kubeflow.org", 100)
        assert scalable_kind(req) is tfjob
        assert reader.replicas_path(req, tfjob) == ("spec", "tfReplicaSpecs", "Worker", "replicas")
        assert reader.replicas_path(req, tfjob) == ("spec", "tfReplicaSpecs", "Worker", "replicas")
        assert [c.path for c in server.calls] == ["/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                                  "tfjobs.kubeflow.org"]  # cached after the first
        crd.update(_tfjob_crd(None))
        reader._paths.clear()
        with pytest.raises(ScaleError, match="declares no scale subresource"):
            reader.replicas_path(req, tfjob)


def test_a_tfjob_scaled_past_the_gpu_total_by_its_crds_path_is_a_new_finding():
    tfjob = next(k for k in KINDS if k.kind == "TFJob")
    role = {"replicas": 1, "template": {"spec": pvc_pod_spec(8)}}
    stored = ENGINE.evaluate({"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                              "metadata": {"name": "w", "namespace": "ml",
                                           "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                              "spec": {"tfReplicaSpecs": {"Chief": role, "Worker": role}}}).mutated
    req = scale_request("tfjobs", "kubeflow.org", 100)
    update = as_workload_update(req, tfjob, stored, ("spec", "tfReplicaSpecs", "Worker", "replicas"))
    assert get_path(update.object, ("spec", "tfReplicaSpecs", "Worker", "replicas")) == 100
    decision = ENGINE.evaluate(update.object, RequestContext(operation="UPDATE", namespace="ml", validate=True,
                                                             mutate=False, old_object=stored))
    assert any(v.policy == "gpu-request-shape" for v in decision.denials), decision.violations
    with pytest.raises(ScaleError, match="does not know where"):
        as_workload_update(req, tfjob, stored)  # no path declared and none given
