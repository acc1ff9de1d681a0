"""The ASGI app of one server process: routes, error answers, and the background reloaders.

Every answer that is not an AdmissionReview is ``{"error": …}`` JSON (404, 405, 500 included),
and paths are matched exactly: ``/validate/`` is a 404, never a redirect whose Location would
come from the client's Host header.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import sys
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from gpuguard.webhook.server import filewatch, limits, logs, metrics, protocol, tls
from gpuguard.webhook.server.fairness import FairQueue
from gpuguard.webhook.server.namespaces import NamespaceLabels
from gpuguard.webhook.server.review import handle_review, json_response
from gpuguard.webhook.server.state import Active, ServerState, ServeSettings, build_active

if TYPE_CHECKING:
    from gpuguard.webhook.server.certwatch import SelfManagedCerts

SETTINGS_ENV = "GPUGUARD_SERVE_SETTINGS"


def _tune_gc() -> None:
    """Keep full garbage collections off the review path.

    Everything imported and loaded at start (FastAPI, pydantic models, the compiled config) is
    long-lived; ``gc.freeze`` moves it out of the collector's sight, and a higher gen-0
    threshold makes collections rarer.  Measured (bench/): gen-2 passes over ~60k objects cost
    ~36 ms each and set the p99 of 60 KB reviews; with this the p99 at 500 reviews/s went from
    26 ms to 3 ms.  Runs in each worker, after start-up allocations.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)


def _tune_threads() -> None:
    """Hand the GIL over more often than Python's default 5 ms: while an engine thread judges a large
    review, the event loop (probes, other reviews' I/O) waits for the GIL at most this long per turn."""
    sys.setswitchinterval(limits.GIL_SWITCH_SECONDS)


def _watchers(server: ServerState, settings: ServeSettings) -> list[filewatch.Watcher]:
    """One watcher per file group: a slow config reload can't delay a certificate reload."""
    watchers = []
    if settings.config_path:
        config = filewatch.Watcher(settings.reload_interval, name="config")
        config.add((settings.config_path,), server.reload_config)
        watchers.append(config)
    if server.tls is not None and server.certs is None:  # self-managed: certwatch reloads what it writes
        certs = filewatch.Watcher(settings.reload_interval, name="tls")
        certs.add((server.tls.cert_path, server.tls.key_path), server.tls.reload)
        watchers.append(certs)
    return watchers


def _start_watches(server: ServerState, settings: ServeSettings) -> None:
    """The cluster caches the engine reads: DRA claims (``--dra-claims``), the node inventory (``--node-inventory``)."""
    if not (settings.dra_claims or settings.node_inventory):
        return
    from gpuguard.kubeapi.client import connect

    if settings.dra_claims:
        from gpuguard.webhook.server.claimwatch import start_shared_watch

        start_shared_watch(connect(settings.kubeconfig).api)
    if settings.node_inventory:
        from gpuguard.webhook.server.nodewatch import start_node_watch

        server.nodes = start_node_watch(connect(settings.kubeconfig).api, server.apply_nodes,
                                        pool_refresh=settings.nodepool_refresh)


# FastAPI's own OpenTelemetry layer (0.16x) asks the global tracer, meter and logger providers on every request
# before it finds none configured; gpuguard's metrics and review log are its own (docs/monitoring.md), so the
# layer is switched off where this FastAPI has it.
_NO_NATIVE_TELEMETRY: dict = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def create_app(settings: ServeSettings, active: Active | None = None,
               certs: SelfManagedCerts | None = None) -> FastAPI:
    """The ASGI app for one process; loads the config unless the caller already did.  ``certs``:
    the self-managed certificates (``--self-managed-certs``), kept in step by a background task."""
    server = ServerState(settings, active or build_active(settings.config_path))
    server.certs = certs
    protocol.configure(settings.read_timeout, settings.max_connections, settings.max_connections_per_client)
    if settings.namespace_labels:
        server.namespaces = NamespaceLabels.from_kubeconfig(settings.kubeconfig)
    _start_watches(server, settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # uvicorn has built this process's SSL context (TlsContextFactory) before lifespan starts.
        server.tls = tls.process_tls() if settings.tls_cert else None
        tasks = [asyncio.create_task(w.run(), name=f"gpuguard-reload-{w.name}")
                 for w in _watchers(server, settings)]
        if server.certs is not None and server.tls is not None:
            live_tls = server.tls
            tasks.append(asyncio.create_task(server.certs.run(live_tls.reload, lambda: live_tls.cert_pem),
                                             name="gpuguard-selfmanaged-certs"))
        _tune_gc()
        _tune_threads()
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            engine_pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="gpuguard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False, **_NO_NATIVE_TELEMETRY)
    app.state.server = server
    # The engine runs here, off the event loop (``review._judge``): /readyz and other reviews are
    # answered while a large review is judged.
    engine_pool = ThreadPoolExecutor(limits.ENGINE_THREADS, thread_name_prefix="gpuguard-engine")
    app.state.engine_pool = engine_pool
    # Reviews take a slot of the engine's threads in their requester's fair queue (``fairness``): one tenant's
    # flood waits behind itself and past its share is refused, instead of delaying everyone's reviews.
    app.state.fair_queue = FairQueue(limits.ENGINE_THREADS, settings.requester_concurrency,
                                     settings.requester_queue, settings.requester_queue_bytes)

    # POST /mutate and /validate are answered by ``ReviewRoutes`` ahead of the router; these routes stay for
    # what reaches it (another method: 405 with ``Allow: POST``).
    @app.post("/mutate")
    async def mutate(request: Request) -> Response:
        return await handle_review(request, "mutate")

    @app.post("/validate")
    async def validate(request: Request) -> Response:
        return await handle_review(request, "validate")

    @app.get("/healthz")
    async def healthz() -> Response:
        return json_response(200, {"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        reasons = server.not_ready()
        if reasons:
            return json_response(503, {"status": "not ready", "reasons": reasons})
        return json_response(200, {"status": "ready"})

    @app.get("/metrics")
    async def metrics_endpoint() -> Response:
        content, content_type = metrics.render()
        return Response(content=content, media_type=content_type)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        message = {404: f"no such path: {request.url.path}",
                   405: f"method {request.method} not allowed on {request.url.path}"}.get(status, str(exc.detail))
        response = json_response(status, {"error": message})
        if exc.headers:
            response.headers.update(exc.headers)  # Allow: POST on a 405
        return response

    async def on_error(request: Request, exc: Exception) -> Response:
        logs.server_logger().error("unhandled error", extra={"path": request.url.path,
                                                              **logs.exception_summary(exc)})
        return json_response(500, {"error": f"internal error ({type(exc).__name__})"})

    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_error)
    app.add_middleware(ReviewRoutes)
    return app


class ReviewRoutes:
    """``POST /mutate`` and ``POST /validate`` answered at the ASGI level, ahead of FastAPI's router.

    A review needs no routing table, dependency solving or per-route exception wrapper: the path and
    method are compared, the handler reads the body and headers itself (``review.handle_review``) and
    answers every case, malformed and oversized bodies included.  Everything else (probes, metrics,
    404/405 answers, a review route's wrong method) goes through FastAPI as before.  An error that
    escaped the handler would still reach the app's 500 answer (``ServerErrorMiddleware`` wraps this).
    """

    ENDPOINTS = {"/mutate": "mutate", "/validate": "validate"}

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.ENDPOINTS.get(scope.get("path", "")) if scope["type"] == "http" else None
        if endpoint is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        response = await handle_review(Request(scope, receive), endpoint)
        await response(scope, receive, send)


def app_from_env() -> FastAPI:
    """uvicorn factory for ``--workers N``: each spawned worker rebuilds the app from the env."""
    return create_app(ServeSettings.from_json(os.environ[SETTINGS_ENV]))
