"""gpuguard's metrics and review log are its own: FastAPI's OpenTelemetry layer is off, so a review never asks the
global tracer, meter or logger providers for anything (it did on every request, before finding none configured)."""

from __future__ import annotations

import pytest
from opentelemetry import trace as otel_trace  # FastAPI's telemetry layer depends on it (the lock pins both)

from tests.support.asgi_client import AsgiClient, make_app
from tests.support.server import gpu_job, review


def test_a_review_never_asks_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import metrics
    from opentelemetry._logs import _internal as logs_internal

    asked: list[str] = []
    for module, name in ((otel_trace, "get_tracer_provider"), (metrics, "get_meter_provider"),
                         (logs_internal, "get_logger_provider")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda real=real, name=name: asked.append(name) or real())
    client = AsgiClient(make_app())
    try:
        status, body = client.post_json("/mutate", review(gpu_job()))
    finally:
        client.close()
    assert status == 200 and body["response"]["allowed"] is not None
    assert asked == []
