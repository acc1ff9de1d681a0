"""The AdmissionReview envelope and response builder, without a server."""

from __future__ import annotations

import base64

import orjson
import pytest

from gpuguard.webhook.decision import Decision, Violation
from gpuguard.webhook.server import envelope
from gpuguard.webhook.server.envelope import ReviewError, parse_review


def _body(**request: object) -> bytes:
    base = {"uid": "u-1", "kind": {"group": "batch", "version": "v1", "kind": "Job"}, "operation": "CREATE",
            "object": {"kind": "Job"}}
    base.update(request)
    return orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": base})


def _decision(violations: list[Violation], patch: list | None = None,
              allowed: bool | None = None) -> Decision:
    denied = any(v.verdict == "deny" for v in violations)
    return Decision(allowed=not denied if allowed is None else allowed, api_version="batch/v1", kind="Job",
                    namespace="ml", name="train", original={}, mutated={}, patch=patch or [],
                    violations=violations)


def test_parse_keeps_object_as_the_same_dict() -> None:
    req = parse_review(_body(object={"spec": {"a": [1, 2]}}, dryRun=None, subResource="", userInfo={
        "username": "alice", "groups": None, "extra": {"secret": ["x"]}}))
    assert req.uid == "u-1" and req.object == {"spec": {"a": [1, 2]}}
    assert req.dry_run is False and req.sub_resource is None and req.user_info.groups == ()
    assert not hasattr(req.user_info, "extra")


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "not a JSON object"),
    (orjson.dumps({"apiVersion": "v1", "kind": "Pod"}), "AdmissionReview"),
    (orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}),
     "apiVersion"),
    (_body(uid=""), "request.uid"),
    (_body(operation="PATCH"), "request.operation"),
])
def test_parse_refuses_what_is_not_a_review(body: bytes, needle: str) -> None:
    with pytest.raises(ReviewError) as err:
        parse_review(body)
    assert err.value.status == 400 and needle in err.value.reason


def test_missing_uid_is_named() -> None:
    data = orjson.loads(_body())
    del data["request"]["uid"]
    with pytest.raises(ReviewError, match=r"request\.uid: Field required"):
        parse_review(orjson.dumps(data))


def test_object_name_falls_back_to_generate_name() -> None:
    req = parse_review(_body(name="", object={"metadata": {"generateName": "train-"}}))
    assert req.object_name() == "train-"


def test_denial_response_has_403_and_every_message() -> None:
    deny = [Violation("checkpoint-volume", "deny", "spec.template", "no checkpoint volume", "mount a PVC"),
            Violation("job-ttl", "deny", "spec", "no TTL", "set ttlSecondsAfterFinished")]
    review = envelope.from_decision("u-1", "Job", _decision(deny), with_patch=True)
    response = review["response"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and response["uid"] == "u-1"
    assert response["allowed"] is False and "patch" not in response
    status = response["status"]
    assert status["code"] == 403 and status["reason"] == "Forbidden"
    lines = status["message"].split("\n")
    assert lines[0] == "gpuguard denied this Job: 2 policy violation(s)"
    assert lines[1:] == [v.text for v in deny]


def test_patch_only_when_non_empty_and_only_on_mutate() -> None:
    patch = [{"op": "add", "path": "/spec/x", "value": 1}]
    mutated = envelope.from_decision("u", "Job", _decision([], patch), with_patch=True)["response"]
    assert mutated["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(mutated["patch"])) == patch
    assert "patch" not in envelope.from_decision("u", "Job", _decision([], []), with_patch=True)["response"]
    validated = envelope.from_decision("u", "Job", _decision([], patch), with_patch=False)
    assert "patch" not in validated["response"]


def test_warnings_are_short_single_lines_within_the_header_budget() -> None:
    long = Violation("shm-volume", "warn", "spec.template.spec.containers[0]", "x" * 400, "fix\nit")
    short = Violation("job-ttl", "warn", "spec", "no TTL", "set one")
    response = envelope.from_decision("u", "Job", _decision([long, short]), with_patch=False)["response"]
    first, second = response["warnings"]
    assert len(first) <= envelope.WARNING_HARD_LIMIT and "…" in first and "\n" not in first
    # past the limit the path goes and the fix comes first, whole; the reason is cut and explain shows it all
    assert first.startswith("[shm-volume] fix: fix it. Why: xxx")
    assert first.endswith("; more: kubectl gpuguard explain shm-volume")
    assert second == short.text
    many = envelope.cap_warnings(["w" * 250] * 40)
    assert sum(map(len, many)) < 4096 and "more warning(s) not shown" in many[-1]


def test_audit_annotations_use_keys_the_apiserver_accepts() -> None:
    audits = [Violation("job-ttl", "audit", "spec", "no TTL", "set one"),
              Violation("job-ttl", "audit", "spec.x", "again", "too"),
              Violation("weird/id", "audit", "spec", "m" * 3000, "f")]
    response = envelope.from_decision("u", "Job", _decision(audits), with_patch=False)["response"]
    notes = response["auditAnnotations"]
    # The apiserver stores "<webhook name>/<key>" and drops keys with a second slash.
    assert set(notes) == {"job-ttl", "weird-id"}
    assert " | " in notes["job-ttl"] and len(notes["weird-id"]) == envelope.AUDIT_VALUE_LIMIT
    assert response["allowed"] is True and "status" not in response
