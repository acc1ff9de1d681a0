"""Property tests over generated AdmissionReviews, valid and hostile, through the real ASGI app.

How: every case is sent to ``/mutate`` and ``/validate`` of the app ``gpuguard serve`` runs,
called in-process (``tests/support/asgi_client.py``: the same routes, body reading, parsing and
engine, without TLS and sockets, so 10,000 cases fit in CI's couple of minutes; the network
layer is tested over TLS in ``tests/unit/server/test_connections.py``).

Cases: every workload kind gpuguard knows plus unknown ones, with GPU/CPU/odd resource names
and quantities (valid, huge exponents, NaN, floats, wrong types), random JSON put in
random places of the object, deep and wide objects, every operation, UPDATEs with an old
object, subresources, odd dryRun values and broken envelopes.

Properties: never a 5xx and never a traceback (in the answer or the log); an answered review
echoes the uid; what the engine could not judge is denied, never allowed (failureMode closed,
the shipped default); every patch applies with ``jsonpatch`` and mutating the result again gives
no patch; and every accelerator object the server admits satisfies the enforce-mode policies
when the engine judges it directly.

A second property runs UPDATE and ``scale`` reviews of workloads whose stored version the engine
admits as a CREATE: the server never admits an update (or a scaling, answered with the stored
workload through a stand-in reader) whose result the same engine denies as a CREATE.

``GPUGUARD_FUZZ_EXAMPLES`` sets the number of cases (default 10,000); the seed is fixed
(``derandomize``) so CI runs are reproducible.
"""

from __future__ import annotations

import base64
import copy
import logging
import os
import random
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.builders import ADAPTED_KINDS, ALL_KINDS, make

EXAMPLES = int(os.environ.get("GPUGUARD_FUZZ_EXAMPLES", "10000"))
PLACEHOLDER = "__gpuguard_fuzz_deep__"

# ---------------------------------------------------------------- strategies

# JSON integers as orjson (and the apiserver) can carry them: signed/unsigned 64-bit.
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)

# Most of an object is built with a ``random.Random`` seeded by hypothesis: drawing every field
# through hypothesis cost ~30 ms per case, too slow for 10,000 cases in CI.  Hypothesis still
# chooses the kind, the seed, the hostile values and the shape flags, and replays failures.
GOOD_QUANTITIES = ["1", "2", "8", "500m", "64Gi", "1e3", "0", "1.5", "100Mi", 1, 2, 4]
BAD_QUANTITIES = ["1e800000", "NaN", "Infinity", "-Infinity", "1e5000", "9223372036854775808", "8Ei", "1e-99",
                  "", " ", "1.2.3", "0x10", "1e", "Gi", "--1", "1" * 80, 1e300, -(2**63), 2**64 - 1, 0.1, -3,
                  True, None, [], {"a": 1}, "1Ki1"]
RESOURCE_NAMES = ["nvidia.com/gpu", "nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.5gb", "cpu", "memory",
                  "ephemeral-storage", "example.com/foo", "gpu"]


def _quantity(rng: random.Random) -> Any:
    return rng.choice(BAD_QUANTITIES) if rng.random() < 0.15 else rng.choice(GOOD_QUANTITIES)


def _container(rng: random.Random) -> dict:
    container: dict[str, Any] = {"name": rng.choice(["trainer", "app", "sidecar", ""]),
                                 "image": "ghcr.io/example/x:1"}
    if rng.random() < 0.8:
        container["resources"] = {
            section: {rng.choice(RESOURCE_NAMES): _quantity(rng) for _ in range(rng.randint(0, 4))}
            for section in ("limits", "requests") if rng.random() < 0.6}
    if rng.random() < 0.2:
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    if rng.random() < 0.2:
        container["env"] = [{"name": "CHECKPOINT_URI", "value": "s3://b/c"}]
    return container


def _pod_spec(rng: random.Random) -> dict:
    spec: dict[str, Any] = {"containers": [_container(rng) for _ in range(rng.randint(0, 3))]}
    if rng.random() < 0.25:
        spec["initContainers"] = [_container(rng) for _ in range(rng.randint(0, 2))]
    if rng.random() < 0.3:
        spec["volumes"] = rng.choice([
            [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
            [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity(rng)}}],
            [{"name": "scratch", "emptyDir": {}}]])
    if rng.random() < 0.2:
        spec["priorityClassName"] = rng.choice(["inference-critical", "training-standard", "x"])
    if rng.random() < 0.2:
        spec["tolerations"] = [{"key": rng.choice(["nvidia.com/gpu", "x"]), "operator": "Exists"}]
    if rng.random() < 0.2:
        spec["schedulerName"] = rng.choice(["volcano", "default-scheduler"])
    if rng.random() < 0.1:
        spec["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    return spec


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, prefix + (i,))
    return out


def _set(obj: Any, path: tuple, value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step]
    if isinstance(obj, dict | list):
        obj[path[-1]] = value


@st.composite
def workload_objects(draw) -> Any:
    kind = draw(st.sampled_from([*ALL_KINDS, *ADAPTED_KINDS, "ConfigMap"]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    if kind == "ConfigMap":
        obj: Any = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
    else:
        obj = make(kind, _pod_spec(rng), replicas=rng.randint(0, 4), namespace="ml")
    if draw(st.integers(0, 3)) == 0:  # hostile: random JSON somewhere in the object
        paths = [p for p in _paths(obj) if p]
        _set(obj, draw(st.sampled_from(paths)), draw(json_values))
    if draw(st.integers(0, 25)) == 0:  # wide
        spec = obj.get("spec") if isinstance(obj, dict) else None
        if isinstance(spec, dict):
            spec["wide"] = [{"k": i, "v": "x" * 20} for i in range(rng.randint(100, 2000))]
    if draw(st.integers(0, 25)) == 0 and isinstance(obj, dict):  # deep: spliced in as text (see _body)
        obj["deep"] = PLACEHOLDER
    if draw(st.integers(0, 30)) == 0:
        obj = draw(json_values)  # not an object at all
    return obj


@st.composite
def reviews(draw) -> tuple[dict, int]:
    obj = draw(workload_objects())
    operation = draw(st.sampled_from(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT"]))
    api_version = obj.get("apiVersion", "v1") if isinstance(obj, dict) else "v1"
    group, _, version = api_version.rpartition("/") if isinstance(api_version, str) else ("", "", "v1")
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    request: dict[str, Any] = {
        "uid": draw(st.uuids()).hex, "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": "x"}, "namespace": "ml",
        "operation": operation, "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj if operation != "DELETE" else None,
        "dryRun": draw(st.sampled_from([False, True, None])),
    }
    if operation == "UPDATE":
        request["oldObject"] = draw(st.one_of(st.just(copy.deepcopy(obj)), workload_objects()))
    if draw(st.integers(0, 8)) == 0:
        request["subResource"] = draw(st.sampled_from(["scale", "status"]))
    review: dict[str, Any] = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    if draw(st.integers(0, 15)) == 0:  # a broken envelope
        target, key = draw(st.sampled_from([(review, "apiVersion"), (review, "kind"), (request, "uid"),
                                            (request, "operation"), (request, "dryRun"), (request, "userInfo")]))
        target[key] = draw(json_values)
    return review, draw(st.integers(200, 1500))


def _body(review: dict, depth: int) -> bytes:
    deep = b'{"d":' * depth + b"1" + b"}" * depth
    return orjson.dumps(review, option=orjson.OPT_NON_STR_KEYS).replace(f'"{PLACEHOLDER}"'.encode(), deep)


# ---------------------------------------------------------------- properties


class _Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or "Traceback" in text:
            self.seen.append(text)


@pytest.fixture(scope="module")
def harness():
    client = AsgiClient(make_app())  # the shipped default config: failureMode closed
    engine = Engine(load_config(None))
    handler = _Tracebacks()
    logging.getLogger().addHandler(handler)
    logging.getLogger("gpuguard").setLevel(logging.WARNING)
    yield client, engine, handler
    logging.getLogger().removeHandler(handler)
    client.close()


def _post(client: AsgiClient, endpoint: str, body: bytes) -> tuple[int, Any]:
    status, _, raw = client.request("POST", endpoint, body, {"content-type": "application/json"})
    assert status < 500, raw[:500]
    assert b"Traceback" not in raw
    return status, orjson.loads(raw)


def _check_answer(status: int, answer: Any, review: dict) -> dict | None:
    if status != 200:
        assert status in (400, 413) and isinstance(answer.get("error"), str) and answer["error"]
        return None
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    # What could not be judged is refused: never an allow carrying the engine's error.
    assert "could not check" not in " ".join(response.get("warnings", [])), response["warnings"]
    if response.get("status", {}).get("code") == 500:
        assert not response["allowed"] and "could not check" in response["status"]["message"]
    return response


def _patched(obj: Any, response: dict) -> Any:
    if "patch" not in response:
        return obj
    patch = orjson.loads(base64.b64decode(response["patch"]))
    return jsonpatch.apply_patch(obj, patch)


@settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.function_scoped_fixture])
@given(case=reviews())
def test_generated_reviews(harness, case):
    client, engine, tracebacks = harness
    review, depth = case
    body = _body(review, depth)
    status, answer = _post(client, "/mutate", body)
    response = _check_answer(status, answer, review)
    if response is not None and response["allowed"] and PLACEHOLDER.encode() not in body:
        request = review["request"]
        obj = _patched(request["object"], response)
        if "patch" in response:
            again = copy.deepcopy(review)
            again["request"]["object"] = obj
            _, answer2 = _post(client, "/mutate", _body(again, 0))
            assert "patch" not in answer2["response"], "mutating the mutated object changed it again"
        checked = copy.deepcopy(review)
        checked["request"]["object"] = obj
        status, answer3 = _post(client, "/validate", _body(checked, 0))
        validated = _check_answer(status, answer3, checked)
        if validated and validated["allowed"] and request["operation"] in ("CREATE", "UPDATE") \
                and not request.get("subResource") and isinstance(obj, dict):
            ctx = RequestContext(operation=request["operation"], namespace="ml", username="alice",
                                 groups=("system:authenticated",), mutate=False, validate=True,
                                 old_object=request.get("oldObject") if request["operation"] == "UPDATE" else None)
            decision = engine.evaluate(copy.deepcopy(obj), ctx)
            assert decision.error is None, decision.error
            if decision.gpus:
                assert not decision.denials, [v.text for v in decision.denials]
    else:
        _post(client, "/validate", body)
    assert not tracebacks.seen, tracebacks.seen[:3]


# ---------------------------------------------------------------- UPDATE and scale


class _StoredWorkload:
    """Stands in for the server's workload reader: ``kubectl scale`` reads this stored object."""

    def __init__(self) -> None:
        self.stored: dict = {}

    def read(self, req: Any) -> dict:
        return self.stored


@pytest.fixture(scope="module")
def update_harness():
    app = make_app()
    reader = _StoredWorkload()
    app.state.server.workloads = reader
    client = AsgiClient(app)
    yield client, Engine(load_config(None)), reader
    client.close()


def _scalable() -> list[str]:
    from gpuguard.workloads import kinds

    out = []
    for name in ALL_KINDS:
        obj = make(name, {"containers": []})
        spec = kinds.lookup(obj["apiVersion"], obj["kind"])
        if spec is not None and spec.scale_replicas is not None:
            out.append(name)
    return out


def _good_pod_spec(rng: random.Random) -> dict:
    """A GPU pod most policies pass: whole GPUs (sometimes past a node), a persistent checkpoint volume."""
    gpus = rng.choice([1, 2, 4, 8, 8, 16])
    return {"containers": [{"name": "trainer", "image": "ghcr.io/example/x:1",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}]}


def _workload(kind: str, rng: random.Random, good: bool, replicas: int) -> dict:
    obj = make(kind, _good_pod_spec(rng) if good else _pod_spec(rng), replicas=replicas, namespace="ml")
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "q"}  # a gang, where one is needed
    return obj


@st.composite
def updates(draw) -> tuple[dict, dict, str | None]:
    """(stored, updated, subresource): a GPU workload as stored (mutated) and an edit or a ``scale`` of it."""
    scale = draw(st.integers(0, 2)) == 0
    kind = draw(st.sampled_from(_scalable() if scale else [*ALL_KINDS, *ADAPTED_KINDS]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    stored = _workload(kind, rng, draw(st.integers(0, 4)) > 0, rng.randint(0, 6))
    stored = _STORE_ENGINE.evaluate(stored, RequestContext(namespace="ml")).mutated  # as the apiserver stored it
    updated = _workload(kind, rng, draw(st.booleans()), rng.randint(0, 12)) if draw(st.booleans()) \
        else copy.deepcopy(stored)
    if draw(st.integers(0, 3)) == 0:
        paths = [p for p in _paths(updated) if p]
        _set(updated, draw(st.sampled_from(paths)), draw(json_values))
    if scale:
        return stored, {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "w", "namespace": "ml"},
                        "spec": {"replicas": draw(st.integers(0, 40))}}, "scale"
    return stored, updated, None


_STORE_ENGINE = Engine(load_config(None))


def _review(obj: Any, old: dict, subresource: str | None) -> dict:
    api_version = old["apiVersion"]
    group, _, version = api_version.rpartition("/")
    from gpuguard.workloads import kinds

    spec = kinds.lookup(api_version, old["kind"])
    plural = spec.plural if spec is not None else "x"
    request: dict[str, Any] = {
        "uid": "u-update", "kind": {"group": group, "version": version, "kind": old["kind"]},
        "resource": {"group": group, "version": version, "resource": plural}, "namespace": "ml", "name": "w",
        "operation": "UPDATE", "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj, "oldObject": old,
    }
    if subresource:
        request["subResource"] = subresource
        request["kind"] = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def _create_denied(engine: Engine, obj: Any) -> bool:
    ctx = RequestContext(operation="CREATE", namespace="ml", username="alice", groups=("system:authenticated",))
    decision = engine.evaluate(copy.deepcopy(obj), ctx)
    return not decision.allowed


@settings(max_examples=max(EXAMPLES // 4, 1), derandomize=True, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.function_scoped_fixture])
@given(case=updates())
def test_updates_and_scales_never_admit_what_a_create_would_deny(update_harness, case):
    client, engine, reader = update_harness
    stored, obj, subresource = case
    if _create_denied(engine, stored):
        return  # a stored object with findings of its own: UPDATE rules judge only what changes
    reader.stored = stored
    review = _review(obj, stored, subresource)
    if subresource is None:  # the mutating webhook runs first; /validate sees what it hands on
        status, mutated = _post(client, "/mutate", orjson.dumps(review, option=orjson.OPT_NON_STR_KEYS))
        response = _check_answer(status, mutated, review)
        if response is None or not response["allowed"]:
            return
        obj = _patched(copy.deepcopy(obj), response)
        review = _review(obj, stored, subresource)
    status, answer = _post(client, "/validate", orjson.dumps(review, option=orjson.OPT_NON_STR_KEYS))
    response = _check_answer(status, answer, review)
    if response is None or not response["allowed"]:
        return
    result = obj
    if subresource == "scale":
        from gpuguard.webhook.server.scale import scaled
        from gpuguard.workloads import kinds

        spec = kinds.lookup(stored["apiVersion"], stored["kind"])
        assert spec is not None
        result = scaled(stored, spec, obj["spec"]["replicas"])
    assert not _create_denied(engine, result), "an UPDATE admitted what a CREATE of the same object is denied"
