"""What gpuguard changed of the user's values comes back as kubectl warnings from /mutate."""

from __future__ import annotations

import pytest

from gpuguard.webhook.decision import Change, Decision
from gpuguard.webhook.server import envelope
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.server import decoded_patch, gpu_job, review

THIRTY_DAYS, SEVEN_DAYS = 30 * 86400, 7 * 86400


@pytest.fixture
def client():
    client = AsgiClient(make_app())
    yield client
    client.close()


def _job_asking(ttl: int) -> dict:
    job = gpu_job(volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
                  mounts=[{"name": "ckpt", "mountPath": "/checkpoints"}])
    job["spec"]["ttlSecondsAfterFinished"] = ttl
    return job


def test_mutate_warns_about_a_capped_ttl_with_policy_field_and_both_values(client) -> None:
    status, answer = client.post_json("/mutate", review(_job_asking(THIRTY_DAYS)))
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is True
    assert {"op": "replace", "path": "/spec/ttlSecondsAfterFinished", "value": SEVEN_DAYS} in decoded_patch(response)
    [warning] = [w for w in response.get("warnings", []) if "[job-ttl]" in w]
    assert warning.startswith(f"gpuguard [job-ttl] capped spec.ttlSecondsAfterFinished on the Job: {THIRTY_DAYS} -> "
                              f"{SEVEN_DAYS} (")
    assert len(warning) <= envelope.WARNING_HARD_LIMIT


def test_a_ttl_under_the_cap_or_a_default_added_gives_no_change_warning(client) -> None:
    for job in (_job_asking(3600), gpu_job(volumes=[{"name": "c", "persistentVolumeClaim": {"claimName": "c"}}],
                                           mounts=[{"name": "c", "mountPath": "/checkpoints"}])):
        _, answer = client.post_json("/mutate", review(job))
        response = answer["response"]
        assert "patch" in response  # mutated (tolerations, TTL default …), yet nothing the user set was changed
        assert not [w for w in response.get("warnings", []) if w.startswith("gpuguard [")]


def test_validate_repeats_no_change_warning(client) -> None:
    _, answer = client.post_json("/validate", review(_job_asking(THIRTY_DAYS)))
    assert not [w for w in answer["response"].get("warnings", []) if "capped" in w]


def test_change_warnings_stay_within_the_header_budget() -> None:
    changes = [Change("job-ttl", f"spec.templates[step-{i}].ttlStrategy.secondsAfterFailure", "capped",
                      THIRTY_DAYS, SEVEN_DAYS, "Workflow") for i in range(200)]
    decision = Decision(allowed=True, api_version="argoproj.io/v1alpha1", kind="Workflow", namespace="ml", name="w",
                        original={}, mutated={}, patch=[{"op": "add", "path": "/x", "value": 1}], changes=changes)
    warnings = envelope.from_decision("u", "Workflow", decision, with_patch=True)["response"]["warnings"]
    assert sum(len(w) for w in warnings) <= envelope.WARNINGS_TOTAL_LIMIT
    assert warnings[-1].startswith("gpuguard: ") and "more warning(s) not shown" in warnings[-1]
    assert all(len(w) <= envelope.WARNING_HARD_LIMIT for w in warnings)
