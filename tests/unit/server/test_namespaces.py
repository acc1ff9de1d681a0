"""``--namespace-labels``: cached namespace label lookups feeding label-selected profiles (in process)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import orjson

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.server.envelope import parse_review
from gpuguard.webhook.server.namespaces import NamespaceLabels
from gpuguard.webhook.server.review import answer
from gpuguard.webhook.server.state import Active, ServerState, ServeSettings
from tests.support.server import gpu_job, review

CONFIG = """\
apiVersion: gpuguard.io/v1alpha1
kind: GpuguardConfig
policies:
  checkpoint-volume:
    action: enforce
profiles:
  - name: sandbox
    match:
      namespaceLabels:
        tier: dev
    policies:
      checkpoint-volume:
        action: warn
"""


class FakeCoreV1:
    """Stands in for ``CoreV1Api.read_namespace``."""

    def __init__(self, labels: dict[str, dict[str, str]]) -> None:
        self.labels = labels
        self.calls = 0
        self.down = False

    def read_namespace(self, name: str, _request_timeout: float | None = None) -> SimpleNamespace:
        self.calls += 1
        if self.down:
            raise ConnectionError("apiserver unreachable")
        return SimpleNamespace(metadata=SimpleNamespace(labels=self.labels.get(name)))


def test_lookups_are_cached_and_survive_api_errors() -> None:
    api = FakeCoreV1({"ml": {"tier": "dev"}})
    cache = NamespaceLabels(api)

    async def run() -> None:
        assert await cache.get("ml") == {"tier": "dev"}
        assert await cache.get("ml") == {"tier": "dev"}
        assert api.calls == 1
        assert await cache.get("other") == {}
        assert await cache.get(None) == {}
        api.down = True
        cache._cache["ml"] = (0.0, {"tier": "dev"})  # expired: the next get asks again, and fails
        assert await cache.get("ml") == {"tier": "dev"}  # last known labels
        assert await cache.get("new") == {}

    asyncio.run(run())


def _runtime(api: FakeCoreV1 | None) -> ServerState:
    config = parse_config_text(CONFIG, "test.yaml")
    server = ServerState(ServeSettings(), Active(config, Engine(config)))
    server.namespaces = NamespaceLabels(api) if api else None
    return server


def _validate(server: ServerState) -> dict:
    req = parse_review(orjson.dumps(review(gpu_job())))  # namespace "ml"
    labels = asyncio.run(server.namespace_labels(req))
    body, _ = answer(server, "validate", req, labels)
    return body["response"]


def test_label_selected_profile_applies_only_with_the_lookup() -> None:
    assert _validate(_runtime(None))["allowed"] is False
    lenient = _validate(_runtime(FakeCoreV1({"ml": {"tier": "dev"}})))
    assert lenient["allowed"] is True
    assert any(w.startswith("[checkpoint-volume]") for w in lenient["warnings"])
    assert _validate(_runtime(FakeCoreV1({"ml": {"tier": "prod"}})))["allowed"] is False
