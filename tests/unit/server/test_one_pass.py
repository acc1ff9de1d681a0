"""One evaluation per create (``webhook/server/onepass.py``): /validate takes what /mutate found only on proof.

Every review gets its own uid here, as from a real apiserver (each webhook call has its own).

The fixture suite shows the two halves equal separate reviews (``test_shells_agree``, shell webhook-one-pass);
here: what must make the validating review evaluate again (another change of the object, another engine, a
second use, age), what must not (the apiserver's own metadata), and the cache's bound.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import jsonpatch
import orjson
import pytest

from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.server import metrics, onepass
from gpuguard.webhook.server.state import build_active
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.gpuguard_process import DEFAULT_CONFIG
from tests.support.paths import REPO
from tests.support.server import decoded_patch, review

CTX = RequestContext(namespace="ml", username="alice@example.com", groups=("ml-team",))
BODY = REPO / "bench" / "bodies" / "gpu-job-pvc.mutate.json"


def _job() -> dict[str, Any]:
    obj = orjson.loads(BODY.read_bytes())["request"]["object"]
    obj["metadata"].setdefault("namespace", "ml")
    return obj


def _reused() -> float:
    return metrics.ONE_PASS.labels(result="reused")._value.get()


@pytest.fixture
def client() -> Any:
    client = AsgiClient(make_app())
    yield client
    client.close()


def _review(obj: dict, user: str | None = None) -> dict:
    body = review(obj)
    if user:
        body["request"]["userInfo"]["username"] = user
    return body


def _mutate(client: AsgiClient, obj: dict, user: str | None = None) -> dict:
    _, answer = client.post_json("/mutate", _review(obj, user))
    response = answer["response"]
    assert response["allowed"], response
    return jsonpatch.apply_patch(obj, decoded_patch(response)) if "patch" in response else obj


def _validate(client: AsgiClient, obj: dict, user: str | None = None) -> tuple[dict, float]:
    before = _reused()
    _, answer = client.post_json("/validate", _review(obj, user))
    return answer["response"], _reused() - before


def _without_checkpoints(job: dict) -> dict:
    job = copy.deepcopy(job)
    spec = job["spec"]["template"]["spec"]
    spec.pop("volumes", None)
    for container in spec["containers"]:
        container.pop("volumeMounts", None)
    return job


def test_the_object_mutate_returned_is_validated_from_its_one_evaluation(client: AsgiClient) -> None:
    mutated = _mutate(client, _job())
    response, reused = _validate(client, mutated)
    assert (response["allowed"], reused) == (True, 1)
    assert len(client.app.state.server.one_pass) == 0  # taken once


def test_the_apiservers_own_fields_are_no_change(client: AsgiClient) -> None:
    """Between mutating and validating admission the apiserver names, stamps and resets the object (BeforeCreate):
    none of it is a change a policy reads."""
    job = _job()
    job["metadata"].pop("name", None)
    job["metadata"]["generateName"] = "train-"
    stored = _mutate(client, job)
    stored["metadata"].update(name="train-x7k2p", uid="0d8f5a52-2f1b-4d3e-9c55-000000000001",
                              creationTimestamp="2026-11-29T06:00:00Z", generation=1,
                              managedFields=[{"manager": "kubectl", "operation": "Update"}])
    stored["status"] = {}
    # The Job's PrepareForCreate: a selector and the labels it selects on the pod template.
    stored["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "0d8f5a52"}}
    stored["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {}).update({
        "batch.kubernetes.io/controller-uid": "0d8f5a52", "controller-uid": "0d8f5a52",
        "batch.kubernetes.io/job-name": "train-x7k2p", "job-name": "train-x7k2p"})
    response, reused = _validate(client, stored)
    assert (response["allowed"], reused) == (True, 1)


def test_a_change_after_gpuguards_mutation_is_judged_in_full(client: AsgiClient) -> None:
    """Another mutating webhook drops the checkpoint volume after gpuguard's review: what /mutate found of the
    object it returned says nothing of this one, so /validate evaluates it — and denies."""
    mutated = _mutate(client, _job())
    response, reused = _validate(client, _without_checkpoints(mutated))
    assert reused == 0
    assert response["allowed"] is False and "checkpoint-volume" in response["status"]["message"]


def test_the_same_object_from_another_user_is_evaluated(client: AsgiClient) -> None:
    """Who asks is part of what the decision reads (exemptions, trusted controllers)."""
    mutated = _mutate(client, _without_checkpoints(_job()), "alice@example.com")
    response, reused = _validate(client, mutated, "bob@example.com")
    assert reused == 0 and response["allowed"] is False


def test_a_reloaded_config_evaluates_again(client: AsgiClient) -> None:
    """What the old engine found is not the new one's answer."""
    mutated = _mutate(client, _job())
    server = client.app.state.server
    server.active = build_active(None)
    _, reused = _validate(client, mutated)
    assert reused == 0


def test_a_reinvoked_mutation_keeps_one_answer(client: AsgiClient) -> None:
    first = _mutate(client, _job())
    again = _mutate(client, first)  # reinvocationPolicy: IfNeeded sends the mutated object again
    assert len(client.app.state.server.one_pass) == 1
    _, reused = _validate(client, again)
    assert reused == 1


def test_a_denied_or_unjudged_create_keeps_nothing(client: AsgiClient) -> None:
    """What the mutating review refuses never reaches /validate; a kind gpuguard skips has nothing to keep."""
    bad = _job()
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "NaN"
    _, answer = client.post_json("/mutate", review(bad))
    assert answer["response"]["allowed"] is False
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}}
    client.post_json("/mutate", review(cm))
    assert len(client.app.state.server.one_pass) == 0


def _decision() -> Any:
    from gpuguard.webhook.decision import Decision

    return Decision(allowed=True, api_version="batch/v1", kind="Job", namespace="ml", name="j", original=None,
                    mutated=None)


def test_the_cache_is_bounded_by_entries_and_age() -> None:
    cache = onepass.ValidationCache(capacity=8, ttl=60)
    judge = (object(),)
    for i in range(100):
        cache.keep(CTX, {"kind": "Job", "spec": {"i": i}}, judge, _decision())
    assert len(cache) == 8
    assert cache.take(CTX, {"kind": "Job", "spec": {"i": 0}}, judge) is None  # pushed out
    assert cache.take(CTX, {"kind": "Job", "spec": {"i": 99}}, judge) is not None
    assert cache.take(CTX, {"kind": "Job", "spec": {"i": 99}}, judge) is None  # taken once
    stale = onepass.ValidationCache(capacity=8, ttl=0)
    stale.keep(CTX, {"kind": "Job"}, judge, _decision())
    assert stale.take(CTX, {"kind": "Job"}, judge) is None
    stale.keep(CTX, {"kind": "Job", "spec": {}}, judge, _decision())
    stale.keep(CTX, {"kind": "Job", "spec": {"x": 1}}, judge, _decision())
    assert len(stale) == 1  # the older entry went when the new one came


def test_another_engine_or_inventory_is_a_miss() -> None:
    cache = onepass.ValidationCache()
    engine, nodes = object(), object()
    cache.keep(CTX, {"kind": "Job"}, (engine, nodes), _decision())
    assert cache.take(CTX, {"kind": "Job"}, (engine, object())) is None


def test_concurrent_reviews_each_find_their_own() -> None:
    cache = onepass.ValidationCache(capacity=4096)
    judge = (object(),)
    found: list[bool] = []

    def one(i: int) -> None:
        obj = {"kind": "Job", "spec": {"i": i}}
        cache.keep(CTX, obj, judge, _decision())
        found.append(cache.take(CTX, obj, judge) is not None)

    threads = [threading.Thread(target=lambda k=k: [one(k * 100 + j) for j in range(100)]) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found.count(True) == 800 and len(cache) == 0


def test_who_asks_where_is_part_of_the_digest() -> None:
    obj = {"kind": "Job", "spec": {}}
    other_labels = RequestContext(namespace="ml", username="alice@example.com", groups=("ml-team",),
                                  namespace_labels={"gpuguard.io/profile": "serving"})
    keys = {onepass.digest(c, obj) for c in (CTX, other_labels, RequestContext(namespace="other"),
                                              RequestContext(namespace="ml", username="alice@example.com"))}
    assert len(keys) == 4


def test_a_user_label_on_the_job_template_is_still_read() -> None:
    """Only the four labels the Job controller's selector uses are the apiserver's; any other is the user's."""
    job = {"kind": "Job", "spec": {"template": {"metadata": {"labels": {"gpuguard.io/workload-class": "training"}}}}}
    other = {"kind": "Job", "spec": {"template": {"metadata": {"labels": {"gpuguard.io/workload-class": "inference"}}}}}
    assert onepass.digest(CTX, job) != onepass.digest(CTX, other)


def _bare_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "trainer", "image": "ghcr.io/example/train:1",
            "env": [{"name": "CHECKPOINT_URI", "value": "s3://team/ckpt"}],
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def _with_priority(pod: dict) -> dict:
    """The pod as the apiserver's Priority admission leaves it after gpuguard named its class."""
    pod = copy.deepcopy(pod)
    pod["spec"].update(priority=10000, preemptionPolicy="PreemptLowerPriority")
    return pod


def _unchanged() -> float:
    return metrics.REINVOCATIONS._value.get()


def test_a_pod_reinvoked_after_the_priority_admission_is_answered_unchanged_without_evaluating(
        client: AsgiClient) -> None:
    """A bare Pod create is three reviews: gpuguard names a priority class, the apiserver's Priority admission sets
    the priority from it and calls gpuguard again (reinvocationPolicy IfNeeded), then validates.  The second call
    receives what gpuguard returned: answered unchanged from what it kept, and /validate still reuses it."""
    returned = _mutate(client, _bare_pod())
    assert returned["spec"]["priorityClassName"] == "training-standard"
    reinvoked = _with_priority(returned)
    engine = client.app.state.server.active.engine
    calls: list[int] = []
    original = engine.evaluate
    engine.evaluate = lambda *a, **k: calls.append(1) or original(*a, **k)  # type: ignore[method-assign]
    try:
        before = _unchanged()
        _, answer = client.post_json("/mutate", _review(reinvoked))
        assert answer["response"]["allowed"] and "patch" not in answer["response"]
        assert _unchanged() - before == 1 and calls == []  # nothing evaluated
        response, reused = _validate(client, reinvoked)
        assert (response["allowed"], reused, calls) == (True, 1, [])
    finally:
        engine.evaluate = original  # type: ignore[method-assign]


def test_a_reinvocation_with_anything_else_changed_is_evaluated(client: AsgiClient) -> None:
    returned = _mutate(client, _bare_pod())
    other = _with_priority(returned)
    other["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 9  # another webhook's change
    before = _unchanged()
    client.post_json("/mutate", _review(other))
    assert _unchanged() == before  # evaluated: what it keeps for /validate is the 9-GPU pod's
    response, reused = _validate(client, other)
    assert (response["allowed"], reused) == (False, 1)  # 9 GPUs are more than a node has


def test_with_custom_rules_a_pods_priority_is_compared_too() -> None:
    """A custom rule may read spec.priority: what was judged without it is not taken for the object with it."""
    rule = """
customPolicies:
  - id: no-huge-priority
    title: Pods keep a modest priority
    action: enforce
    scope: object
    validations:
      - expression: "!has(object.spec.priority) || object.spec.priority < 5000"
        message: priority too high
"""
    client = AsgiClient(make_app(DEFAULT_CONFIG.read_text() + rule))
    try:
        returned = _mutate(client, _bare_pod())
        before = _unchanged()
        client.post_json("/mutate", _review(_with_priority(returned)))
        assert _unchanged() == before  # evaluated again
        response, _ = _validate(client, _with_priority(returned))
        assert response["allowed"] is False and "priority too high" in response["status"]["message"]
    finally:
        client.close()


def test_every_fixture_pod_is_unchanged_by_a_second_mutation_after_its_priority_is_set() -> None:
    """What makes the reinvocation answer sound: gpuguard's mutation of a Pod it mutated, with the priority the
    apiserver derives from the class it named, changes nothing (every Pod among the fixture cases' inputs)."""
    import yaml

    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.engine.core import Engine

    engine = Engine(load_config())
    mutate = RequestContext(operation="CREATE", namespace="ml", mutate=True, validate=False)
    pods = 0
    for path in sorted((REPO / "tests" / "policies").rglob("input.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if not isinstance(obj, dict) or obj.get("kind") != "Pod" or obj.get("apiVersion") != "v1":
                continue
            first = engine.evaluate(obj, mutate)
            if first.error or first.skipped or first.invalid:
                continue
            pods += 1
            second = engine.evaluate(_with_priority(first.mutated), mutate)
            assert second.patch == [], (path, second.patch)
    assert pods >= 20, pods
