"""shared-rwo-claim in the webhook: the claims a multi-pod workload's pods share are read before the review
(``ApiLookup.prefetch``, cached), from the core API, and the engine reads only the cache."""

from __future__ import annotations

from typing import Any

import orjson

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.objects import ApiLookup, StaticLookup, reads_objects

ENGINE = Engine(parse_config_text("kind: GpuguardConfig\n"))
POLICY = "shared-rwo-claim"


def _job(parallelism: int, claim: str = "ckpt") -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"parallelism": parallelism, "completions": parallelism, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "t", "image": "t:1", "command": ["python", "train.py"],
                                "volumeMounts": [{"name": "c", "mountPath": "/checkpoints"}],
                                "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "64Gi"}}}],
                "volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": claim}}]}}}}


def _claim(name: str, modes: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"accessModes": modes}}


class _Api:
    """The API as the custom-objects client sees it (no raw client): the claims, counting the reads."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects, self.reads = StaticLookup(objects), []

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **_: Any) -> dict:
        self.reads.append((group, plural, namespace, name))
        found = self.objects(group, "PersistentVolumeClaim", namespace, name)
        if found is None:
            raise LookupError(name)
        return found


def _findings(decision: Any) -> list[str]:
    return [v.verdict for v in decision.violations if v.policy == POLICY]


def test_the_server_reads_shared_claims_before_the_engine_and_the_engine_reads_the_cache() -> None:
    api = _Api([_claim("ckpt", ["ReadWriteOnce"])])
    lookup = ApiLookup(api=api)
    ctx = RequestContext(namespace="ml", mutate=False, read_object=lookup.cached)
    # nothing cached: nothing read on the engine's thread, and the claim is said to be not fully checked
    unread = [v.message for v in ENGINE.evaluate(_job(2), ctx).violations if v.policy == POLICY]
    assert len(unread) == 1 and unread[0].startswith("not fully checked: 2 pods mount claim 'ckpt'")
    assert api.reads == []
    assert reads_objects(_job(2))
    lookup.prefetch(_job(2), "ml")
    assert api.reads == [("", "persistentvolumeclaims", "ml", "ckpt")]
    assert _findings(ENGINE.evaluate(_job(2), ctx)) == ["warn"]
    lookup.prefetch(_job(2), "ml")
    assert len(api.reads) == 1  # cached


def test_single_pod_workloads_read_no_claims() -> None:
    api = _Api([_claim("ckpt", ["ReadWriteOnce"])])
    assert not reads_objects(_job(1))
    ApiLookup(api=api).prefetch(_job(1), "ml")
    assert api.reads == []


def test_claims_are_read_from_the_core_api(monkeypatch: Any) -> None:
    """The custom-objects client builds ``/apis/{group}/...``: a core object is read at ``/api/v1`` instead."""
    paths: list[str] = []

    class _Response:
        data = orjson.dumps(_claim("ckpt", ["ReadWriteOncePod"]))

    def request(api: Any, method: str, path: str, **_: Any) -> _Response:
        paths.append(f"{method} {path}")
        return _Response()

    monkeypatch.setattr("gpuguard.kubeapi.client.request", request)

    class _Client:
        api_client = object()

    lookup = ApiLookup(api=_Client())
    assert lookup("", "PersistentVolumeClaim", "ml", "ckpt") == _claim("ckpt", ["ReadWriteOncePod"])
    assert paths == ["GET /api/v1/namespaces/ml/persistentvolumeclaims/ckpt"]
    decision = ENGINE.evaluate(_job(2), RequestContext(namespace="ml", read_object=lookup))
    assert _findings(decision) == ["deny"]


def test_a_claim_in_the_same_manifests_is_read() -> None:
    lookup = StaticLookup([_job(3), _claim("ckpt", ["ReadWriteOncePod"])])
    assert _findings(ENGINE.evaluate(_job(3), RequestContext(namespace="ml", read_object=lookup))) == ["deny"]
    many = StaticLookup([_claim("ckpt", ["ReadWriteOnce", "ReadWriteMany"])])
    assert _findings(ENGINE.evaluate(_job(3), RequestContext(namespace="ml", read_object=many))) == []
