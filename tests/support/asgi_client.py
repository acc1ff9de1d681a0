"""Call the real gpuguard ASGI app in-process: no socket, no TLS, the same routes and handlers.

Used where a test sends many requests or needs exact control of the body (fuzzing, hostile
inputs); what only the network layer does (timeouts, TLS, connection caps) is tested against a
real ``gpuguard serve`` in ``test_server_connections.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.server.app import create_app
from gpuguard.webhook.server.state import Active, ServeSettings


def make_app(config_text: str | None = None, **settings: Any):
    from gpuguard.webhook.config import load_config

    config = parse_config_text(config_text, "test-config") if config_text else load_config(None)
    return create_app(ServeSettings(**settings), Active(config, Engine(config)))


class AsgiClient:
    """A minimal synchronous ASGI driver (one event loop for all calls)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()

    def close(self) -> None:
        self.loop.close()

    def request(self, method: str, path: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        return self.loop.run_until_complete(self._call(method, path, body, headers or {}))

    def post_json(self, path: str, payload: Any) -> tuple[int, Any]:
        status, _, body = self.request("POST", path, orjson.dumps(payload),
                                       {"content-type": "application/json"})
        return status, orjson.loads(body) if body else None

    async def _call(self, method: str, path: str, body: bytes,
                    headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        raw_headers.append((b"content-length", str(len(body)).encode()))
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "https", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": raw_headers, "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8443)}
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        status = 0
        out_headers: dict[str, str] = {}
        chunks: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                out_headers.update({k.decode(): v.decode() for k, v in message.get("headers", [])})
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, out_headers, b"".join(chunks)
