"""What gpuguard can't judge is refused, through the real ASGI app, never a 5xx.

Each failure the fuzzer and hostile tenants can reach — a nesting past the interpreter's stack
(RecursionError), a policy that raises, an exception outside the
engine, a TrainJob whose runtime is missing, a DRA claim nobody can resolve, a scaled workload
that can't be read — is answered 200 with a denial that says what couldn't be checked, under the
shipped default (``failureMode: closed``).  ``open`` admits with a warning, and a trusted
controller's request is never refused for it.
"""

from __future__ import annotations

import logging

import orjson
import pytest

from gpuguard.policies import REGISTRY
from gpuguard.webhook.server import review as review_module
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.builders import make
from tests.support.server import gpu_job, review

OPEN = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nfailureMode: open\n"
RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def _ask(endpoint: str, body: dict, config: str | None = None) -> dict:
    client = AsgiClient(make_app(config))
    try:
        status, raw_headers, raw = client.request("POST", endpoint, orjson.dumps(body),
                                                  {"content-type": "application/json"})
    finally:
        client.close()
    assert status == 200, raw[:300]
    assert b"Traceback" not in raw
    answer = orjson.loads(raw)["response"]
    assert answer["uid"] == body["request"]["uid"]
    return answer


def _denied_saying(answer: dict, *parts: str) -> None:
    assert answer["allowed"] is False, answer
    message = answer["status"]["message"]
    assert message.startswith("gpuguard could not check this ") and "denied: failureMode is closed" in message
    for part in parts:
        assert part in message, message


def _break_policies(monkeypatch, boom) -> None:
    for policy_id in ("gpu-tolerations", "checkpoint-volume"):
        monkeypatch.setattr(type(REGISTRY[policy_id]), "run", property(lambda self: boom), raising=False)


def _argo_chain(depth: int) -> dict:
    """A Workflow whose steps call one template after another, ``depth`` deep, GPUs at the end."""
    templates = [{"name": f"t{i}", "steps": [[{"name": "s", "template": f"t{i + 1}"}]]} for i in range(depth)]
    templates.append({"name": f"t{depth}", "container": {"image": "x", "resources": {
        "limits": {"nvidia.com/gpu": "8"}}}})
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "w", "namespace": "ml"},
            "spec": {"entrypoint": "t0", "templates": templates}}


@pytest.mark.parametrize("endpoint", ["/mutate", "/validate"])
def test_a_policy_that_raises_or_recurses_too_deep_is_a_denial(endpoint, monkeypatch):
    for error in (RuntimeError("bug"), RecursionError("maximum recursion depth exceeded")):
        def boom(view, settings, error=error):
            raise error

        _break_policies(monkeypatch, boom)
        _denied_saying(_ask(endpoint, review(gpu_job())), f"its policies could not be evaluated "
                       f"({type(error).__name__})", "simplify it")


def test_an_exception_outside_the_engine_is_a_denial_not_a_500(monkeypatch):
    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(review_module.envelope, "from_decision", broken)
    _denied_saying(_ask("/validate", review(gpu_job())), "internal error (RecursionError)")


@pytest.mark.parametrize("depth", [50, 600])
def test_a_deep_argo_chain_is_judged_or_refused_never_admitted(depth):
    for endpoint in ("/mutate", "/validate"):
        answer = _ask(endpoint, review(_argo_chain(depth)))
        assert answer["allowed"] is (endpoint == "/mutate" and "status" not in answer)
    # /validate: the GPU template has no checkpoint volume, or the walk could not finish: a denial either way


def test_failure_mode_open_admits_with_a_warning_and_says_why(monkeypatch):
    def boom(view, settings):
        raise RecursionError("maximum recursion depth exceeded")

    _break_policies(monkeypatch, boom)
    answer = _ask("/validate", review(gpu_job()), OPEN)
    assert answer["allowed"] is True
    assert "allowed because failureMode is open" in answer["warnings"][0]


def test_a_trusted_controllers_request_is_never_refused_for_what_cant_be_judged():
    pod = make("Pod", {"containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "g"}]}}],
                       "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "nowhere"}]})
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u",
                                           "controller": True}]
    body = review(pod)
    body["request"]["userInfo"] = {"username": RS_CONTROLLER, "groups": ["system:serviceaccounts"]}
    for endpoint in ("/mutate", "/validate"):
        assert _ask(endpoint, body)["allowed"] is True
    body["request"]["userInfo"] = {"username": "alice", "groups": ["system:authenticated"]}
    _denied_saying(_ask("/validate", body), "ResourceClaimTemplate nowhere could not be resolved",
                   "create the claim (template) first")


def test_a_trainjob_without_its_runtime_is_refused_saying_what_to_create():
    from tests.support.builders import pvc_pod_spec

    job = make("TrainJob", pvc_pod_spec(gpus=8))
    _denied_saying(_ask("/validate", review(job)), "its runtime could not be read", "first, then the TrainJob")


def test_a_scale_of_a_workload_that_cant_be_read_is_refused():
    body = review({"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "serve", "namespace": "ml"},
                   "spec": {"replicas": 40}}, "UPDATE", sub_resource="scale")
    body["request"]["resource"] = {"group": "apps", "version": "v1", "resource": "deployments"}
    _denied_saying(_ask("/validate", body), "cannot read the scaled deployments")


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_logged_request_fields_are_size_capped():
    from gpuguard.webhook.server.logs import REVIEW_LOGGER

    body = review(gpu_job(), uid="u" * 2_000_000)  # under the 3 MiB body limit
    body["request"]["userInfo"] = {"username": "x" * 100_000, "groups": ["g" * 1_000] * 500}
    logger, seen = logging.getLogger(REVIEW_LOGGER), _Records()  # its own handler: other tests set up logging
    level = logger.level
    logger.addHandler(seen)
    logger.setLevel(logging.INFO)
    try:
        _ask("/validate", body)
    finally:
        logger.removeHandler(seen)
        logger.setLevel(level)
    (record,) = [r for r in seen.records if r.getMessage() == "admission review"]
    fields = record.fields  # type: ignore[attr-defined]
    assert len(fields["uid"]) == 256 and len(fields["user"]) == 256
    assert len(orjson.dumps(fields)) < 20_000
