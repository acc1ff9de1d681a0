"""Hostile and broken requests, through the real ASGI app.

Each test sends what a hostile or broken client could send and asserts the server's answer:
a clear refusal, never an admission by way of the error path, never a traceback.
"""

from __future__ import annotations

import copy
import gzip
import logging

import orjson
import pytest

from gpuguard.webhook.server import envelope
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.server import gpu_job, review

OPEN = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nfailureMode: open\n"
CLOSED = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nfailureMode: closed\n"


@pytest.fixture
def client_open():
    client = AsgiClient(make_app(OPEN))
    yield client
    client.close()


@pytest.fixture
def client_closed():
    client = AsgiClient(make_app(CLOSED))
    yield client
    client.close()


def _job_with_gpu_quantity(value) -> dict:
    job = gpu_job(volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
                  mounts=[{"name": "ckpt", "mountPath": "/checkpoints"}])
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = value
    return job


def _metric(client: AsgiClient, name: str, **labels: str) -> float:
    _, _, body = client.request("GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("value", ["1e800000", "NaN", "Infinity", "1e5000", "9223372036854775808", "8Ei", "-1e99",
                                   {"nested": 1}, 1e300])
@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_bad_gpu_quantity_is_denied_with_a_clear_message_even_under_failure_mode_open(client_open, endpoint, value):
    sent = review(_job_with_gpu_quantity(value))
    status, answer = client_open.post_json(endpoint, sent)
    assert status == 200
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert response["allowed"] is False, "an invalid quantity must never be admitted through the error path"
    message = response["status"]["message"]
    assert response["status"]["code"] == 422
    assert "[invalid-quantity] spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]" in message
    assert "not a usable quantity" in message and "could not check" not in message


def test_update_is_not_blamed_for_a_bad_quantity_it_left_unchanged(client_open):
    old = _job_with_gpu_quantity("1e5000")
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["touched"] = "yes"
    status, answer = client_open.post_json("/validate", review(new, "UPDATE", old=old))
    assert status == 200
    assert "invalid-quantity" not in answer["response"].get("status", {}).get("message", "")
    newly_bad = copy.deepcopy(new)
    newly_bad["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "NaN"
    _, answer = client_open.post_json("/validate", review(newly_bad, "UPDATE", old=old))
    assert answer["response"]["allowed"] is False
    assert "limits.cpu" in answer["response"]["status"]["message"]


def test_huge_exponent_is_answered_without_the_engine_error_path(client_open, caplog):
    caplog.set_level(logging.ERROR, logger="gpuguard")
    _, answer = client_open.post_json("/validate", review(_job_with_gpu_quantity("1e800000")))
    assert answer["response"]["allowed"] is False
    assert not [r for r in caplog.records if "engine raised" in r.getMessage()]


@pytest.mark.parametrize("depth", [260, 2000])
@pytest.mark.parametrize("fixture", ["client_open", "client_closed"])
def test_deep_object_is_refused_up_front_with_400(request, fixture, depth):
    client: AsgiClient = request.getfixturevalue(fixture)
    job = gpu_job()
    job["metadata"]["annotations"] = {"a": "b"}
    job["spec"]["template"]["metadata"] = {"labels": {"x": "y"}}
    job["spec"]["template"]["spec"]["extra"] = "PLACEHOLDER"
    # orjson (like the engine) can't serialise 255+ levels: splice the deep part in as text.
    deep = b'{"x":' * depth + b"1" + b"}" * depth
    body = orjson.dumps(review(job)).replace(b'"PLACEHOLDER"', deep)
    before = _metric(client, "gpuguard_rejected_requests_total", endpoint="mutate", code="400")
    status, _, raw = client.request("POST", "/mutate", body, {"content-type": "application/json"})
    assert status == 400
    assert orjson.loads(raw) == {"error": f"body nests deeper than {envelope.MAX_DEPTH} levels"}
    assert _metric(client, "gpuguard_rejected_requests_total", endpoint="mutate", code="400") == before + 1


def test_legitimately_nested_object_still_gets_its_mutations(client_closed):
    job = gpu_job(volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
                  mounts=[{"name": "ckpt", "mountPath": "/checkpoints"}])
    job["metadata"]["annotations"] = {"x": "y"}
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "A", "valueFrom": {
        "configMapKeyRef": {"name": "c", "key": "k"}}}]
    status, answer = client_closed.post_json("/mutate", review(job))
    assert status == 200 and answer["response"]["allowed"] is True and "patch" in answer["response"]


def test_unknown_path_and_wrong_method_answer_error_json(client_open):
    status, _, body = client_open.request("GET", "/nope")
    assert status == 404 and orjson.loads(body) == {"error": "no such path: /nope"}
    status, headers, body = client_open.request("GET", "/validate")
    assert status == 405 and orjson.loads(body) == {"error": "method GET not allowed on /validate"}
    assert headers.get("allow") == "POST"


def test_trailing_slash_is_not_redirected(client_open):
    status, headers, body = client_open.request("POST", "/validate/", b"{}", {"host": "evil.example"})
    assert status == 404 and "location" not in headers
    assert orjson.loads(body)["error"].startswith("no such path")


def test_gzip_body_gets_415_or_a_clear_400(client_open):
    packed = gzip.compress(orjson.dumps(review(gpu_job())))
    status, _, body = client_open.request("POST", "/validate", packed, {"content-encoding": "gzip"})
    assert status == 415 and "Content-Encoding 'gzip' is not supported" in orjson.loads(body)["error"]
    assert _metric(client_open, "gpuguard_rejected_requests_total", endpoint="validate", code="415") >= 1
    status, _, body = client_open.request("POST", "/validate", packed)
    assert status == 400 and "gzip-compressed" in orjson.loads(body)["error"]


def test_oversized_body_is_413_and_counted():
    client = AsgiClient(make_app(OPEN, max_body_bytes=2048))
    try:
        before = _metric(client, "gpuguard_rejected_requests_total", endpoint="validate", code="413")
        status, _, body = client.request("POST", "/validate", b"x" * 5000)
        assert status == 413 and "exceeds the 2048-byte limit" in orjson.loads(body)["error"]
        assert _metric(client, "gpuguard_rejected_requests_total", endpoint="validate", code="413") == before + 1
    finally:
        client.close()


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "false"])
def test_dry_run_must_be_a_json_boolean(client_open, value):
    sent = review(gpu_job())
    sent["request"]["dryRun"] = value
    status, answer = client_open.post_json("/validate", sent)
    assert status == 400 and "dryRun" in answer["error"]


def test_dry_run_null_or_boolean_is_accepted(client_open):
    for value in (None, True, False):
        sent = review(gpu_job())
        sent["request"]["dryRun"] = value
        status, answer = client_open.post_json("/validate", sent)
        assert status == 200 and answer["response"]["uid"] == sent["request"]["uid"]


class _BrokenEngine:
    """An engine with a bug: the only way left to reach the error path."""

    inventory = None  # what the server reads of an engine besides evaluate

    def evaluate(self, *args, **kwargs):
        raise KeyError("a bug")


@pytest.mark.parametrize(("config", "allowed"), [(OPEN, True), (CLOSED, False)])
def test_an_engine_bug_is_answered_per_failure_mode_without_a_traceback(config, allowed, caplog):
    app = make_app(config)
    server = app.state.server
    server.active = type(server.active)(server.active.config, _BrokenEngine())
    client = AsgiClient(app)
    try:
        sent = review(gpu_job())
        status, answer = client.post_json("/validate", sent)
    finally:
        client.close()
    response = answer["response"]
    assert status == 200 and response["uid"] == sent["request"]["uid"] and response["allowed"] is allowed
    text = orjson.dumps(answer).decode()
    assert "internal error (KeyError)" in text and "Traceback" not in text and "a bug" not in text
    if allowed:
        assert "failureMode is open" in response["warnings"][0]
    else:
        assert response["status"]["code"] == 500 and "failureMode is closed" in response["status"]["message"]
