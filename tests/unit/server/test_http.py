"""``gpuguard serve`` over real HTTPS with the shipped default config.

One server process for the module (start-up costs a second or two); each test posts
AdmissionReviews the way the apiserver does and checks the AdmissionReview that comes back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import jsonpatch
import orjson
import pytest

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from tests.support.server import Server, decoded_patch, gpu_job, metric_value, review, serve

pytestmark = pytest.mark.timeout(600)  # a bound for a hung server, far above a busy machine's slowest run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("serve"), "--reload-interval", "0.2") as running:
        yield running


def _response(server: Server, endpoint: str, body: dict) -> dict:
    resp = server.post(endpoint, body)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"] == "application/json"
    data = resp.json()
    assert data["apiVersion"] == "admission.k8s.io/v1" and data["kind"] == "AdmissionReview"
    assert data["response"]["uid"] == body["request"]["uid"]
    return data["response"]


def test_mutation_patch_applies_and_equals_the_engine(server: Server) -> None:
    job = gpu_job()
    response = _response(server, "/mutate", review(job))
    assert response["allowed"] is True
    patched = jsonpatch.apply_patch(copy.deepcopy(job), decoded_patch(response))
    ctx = RequestContext(mutate=True, validate=False, namespace="ml", username="alice@example.com",
                         groups=("ml-team", "system:authenticated"))
    expected = Engine(load_config(None)).evaluate(copy.deepcopy(job), ctx)
    assert patched == expected.mutated
    assert patched != job
    tolerations = patched["spec"]["template"]["spec"].get("tolerations", [])
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations)


def test_gpu_job_without_persistent_volume_is_denied(server: Server) -> None:
    response = _response(server, "/validate", review(gpu_job()))
    assert response["allowed"] is False and "patch" not in response
    status = response["status"]
    assert status["code"] == 403
    header, *rest = status["message"].split("\n")
    lines = [line for line in rest if not line.startswith("  why: ")]  # a cut denial's whole reason
    assert header.startswith("gpuguard denied this Job: ") and header.endswith("policy violation(s)")
    assert int(header.split(": ")[1].split()[0]) == len(lines)
    assert any(line.startswith("[checkpoint-volume] ") for line in lines)


def test_non_create_and_subresource_requests_are_allowed_at_once(server: Server) -> None:
    job = gpu_job()
    for endpoint, body in (
        ("/validate", review(job, "DELETE", old=job)),
        ("/mutate", review(job, "CONNECT")),
        ("/validate", review(job, "UPDATE", old=job, sub_resource="status")),
        ("/validate", review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})),
    ):
        response = _response(server, endpoint, body)
        assert response["allowed"] is True, (endpoint, body["request"]["operation"], response)
        assert "patch" not in response and "status" not in response


def test_update_that_changes_nothing_relevant_is_not_denied(server: Server) -> None:
    old = gpu_job()
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "vision"}
    response = _response(server, "/validate", review(new, "UPDATE", old=old))
    assert response["allowed"] is True, response


def test_malformed_bodies_get_400_with_a_json_reason(server: Server) -> None:
    bad_json = server.client.post("/validate", content=b"{nope", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]
    not_review = server.post("/mutate", {"apiVersion": "v1", "kind": "Pod"})
    assert not_review.status_code == 400 and "AdmissionReview" in not_review.json()["error"]
    no_uid = review(gpu_job())
    del no_uid["request"]["uid"]
    missing = server.post("/validate", no_uid)
    assert missing.status_code == 400 and "request.uid" in missing.json()["error"]
    assert "Traceback" not in bad_json.text + not_review.text + missing.text


def test_body_over_the_limit_gets_413(server: Server) -> None:
    job = gpu_job()
    job["metadata"]["annotations"] = {"filler": "x" * (3 * 1024 * 1024 + 10)}
    resp = server.post("/validate", review(job))
    assert resp.status_code == 413 and "limit" in resp.json()["error"]
    # The connection survives for the next review.
    assert _response(server, "/validate", review(gpu_job()))["allowed"] is False


def test_an_object_that_is_not_a_mapping_is_refused_before_the_engine(server: Server) -> None:
    # Not the engine's error path, which failureMode open admits: that path is for bugs only
    # (tested with a failing engine in test_hardening.py).
    body = review(gpu_job())
    body["request"]["object"] = "not a mapping"
    resp = server.post("/validate", body)
    assert resp.status_code == 400
    assert resp.json() == {"error": "not an admission.k8s.io/v1 AdmissionReview: request: Value error, object must "
                                    "be a JSON object for CREATE"}
    assert "Traceback" not in resp.text


def test_dry_run_is_answered_but_not_counted_as_a_violation(server: Server) -> None:
    def denied_count() -> float:
        return metric_value(server.client.get("/metrics").text, "gpuguard_violations_total",
                            {"policy": "checkpoint-volume", "action": "deny"})

    before = denied_count()
    response = _response(server, "/validate", review(gpu_job(), dry_run=True))
    assert response["allowed"] is False
    assert denied_count() == before
    _response(server, "/validate", review(gpu_job()))
    assert denied_count() == before + 1


def test_probes_and_metrics(server: Server) -> None:
    assert server.client.get("/healthz").status_code == 200
    ready = server.client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    _response(server, "/validate", review(gpu_job()))
    metrics = server.client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert metric_value(text, "gpuguard_admission_requests_total",
                        {"endpoint": "validate", "kind": "Job", "decision": "denied"}) >= 1
    assert 'gpuguard_admission_duration_seconds_bucket{endpoint="validate",le="30.0"}' in text
    assert 'gpuguard_admission_duration_seconds_bucket{endpoint="validate",le="0.0005"}' in text
    assert "gpuguard_config_reloads_total" in text
    assert metric_value(text, "gpuguard_cert_expiry_timestamp_seconds") > 1.7e9


def test_review_log_line_is_structured_and_leaks_nothing(server: Server) -> None:
    body = review(gpu_job(name="log-me"))
    _response(server, "/validate", body)
    uid = body["request"]["uid"]
    lines = [orjson.loads(line) for line in server.logs().splitlines() if uid in line]
    assert len(lines) == 1
    entry = lines[0]
    assert entry["uid"] == uid and entry["kind"] == "Job" and entry["namespace"] == "ml"
    assert entry["name"] == "log-me" and entry["operation"] == "CREATE"
    assert entry["user"] == "alice@example.com"
    assert entry["decision"] == "denied" and "checkpoint-volume" in entry["policies"]
    assert entry["dry_run"] is False and entry["latency_ms"] > 0
    log_text = server.logs()
    assert "never-logged" not in log_text and "ghcr.io/example/trainer" not in log_text


def test_only_post_reviews(server: Server) -> None:
    assert server.client.get("/validate").status_code == 405
    assert server.client.get("/docs").status_code == 404



def test_scale_whose_workload_cannot_be_read_follows_failure_mode(server: Server, tmp_path) -> None:
    body = review({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "serve"},
                   "spec": {"replicas": 40}}, "UPDATE", sub_resource="scale")
    body["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    response = _response(server, "/validate", body)
    # The test server has no Kubernetes credentials: the default failureMode (closed) refuses and says why.
    assert response["allowed"] is False
    assert "cannot read the scaled deployments" in response["status"]["message"], response
