"""A scripted HTTP apiserver for unit tests of code that talks through ``kubeapi.client.request``.

Real HTTP and the real ``kubernetes`` ApiClient (timeouts, error statuses and connection handling
are the client's own), with the answers decided by a Python function of the request.  The handler
returns ``(status, body)``; a ``delay`` attribute on the server holds every answer back that long
(to make a client's timeout fire).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubernetes import client as k8s


@dataclass
class Call:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, str]
    body: Any


Handler = Callable[[Call], tuple[int, Any]]


@dataclass
class FakeApiserver:
    handle: Handler
    calls: list[Call] = field(default_factory=list)
    delay: float = 0.0


def status(code: int, reason: str, message: str = "") -> dict[str, Any]:
    """A ``metav1.Status`` failure body, as the apiserver sends with an error code."""
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message or reason,
            "reason": reason, "code": code}


@contextmanager
def serve(handle: Handler) -> Iterator[tuple[FakeApiserver, Any]]:
    """The server's state and an ApiClient pointed at it, for the duration of the block."""
    state = FakeApiserver(handle)

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            call = Call(self.command, url.path, {k: v[0] for k, v in parse_qs(url.query).items()},
                        json.loads(raw) if raw else None)
            state.calls.append(call)
            if state.delay:
                time.sleep(state.delay)
            code, body = state.handle(call)
            data = json.dumps(body).encode()
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:  # the client gave up (its timeout) and closed the connection
                pass

        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815 - http.server API

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    api = k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{httpd.server_address[1]}"))
    try:
        yield state, api
    finally:
        api.close()
        httpd.shutdown()
        httpd.server_close()
