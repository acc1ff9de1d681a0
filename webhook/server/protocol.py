"""uvicorn's HTTP protocol with the limits a cluster-wide webhook needs: read deadline, connection caps.

uvicorn closes idle keep-alive connections, but a client that opens a connection and then
sends nothing, half a request line, part of the headers or part of the body is kept forever:
a handful of such clients hold sockets and memory indefinitely.  This protocol arms one
deadline when a connection is made and again when each request begins, and disarms it when
the request (body included) is complete; a request not read by then is dropped.  Between
requests the normal keep-alive timeout applies, longer than the apiserver's idle timeout so
the server never closes a connection the apiserver is about to reuse.

Connections beyond the cap are closed as soon as they are made, which keeps a flood of
connections from starving the apiserver's own ones of file descriptors and memory.  A cap
alone lets one client fill it (a thousand idle TLS connections, reopened as the read deadline
closes them) and lock the apiserver out, so each client address also gets at most
``max_connections_per_client`` of them: the rest of the cap stays for other addresses.  A
refused connection is aborted, not closed: a TLS close waits up to 30 s for the peer's
close_notify, which a client that never reads doesn't send, and the connection would hold its
place in the cap all that time.  (The
TLS handshake itself is bounded by asyncio's 60 s handshake timeout.)
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gpuguard.webhook.server import logs, metrics


class GuardedHttpProtocol(HttpToolsProtocol):
    """HttpToolsProtocol plus a per-request read deadline, a cap on open connections and one per client address."""

    # Set per process by :func:`configure` (class attributes so spawned workers can set them too).
    read_timeout: float = 10.0
    max_connections: int = 1000
    max_connections_per_client: int = 250
    # Open connections per client address in this process (one event loop: no lock needed).
    _per_client: ClassVar[dict[str, int]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None
        self._counted_host: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            metrics.CONNECTIONS_REFUSED.labels(reason="connection_cap").inc()
            logs.server_logger().warning("connection closed: too many open connections",
                                         extra={"limit": self.max_connections})
            transport.abort()
            return
        host = str(self.client[0]) if self.client else None
        if host is not None:
            held = self._per_client.get(host, 0)
            if held >= self.max_connections_per_client:
                metrics.CONNECTIONS_REFUSED.labels(reason="client_cap").inc()
                logs.server_logger().warning("connection closed: too many open connections from one client",
                                             extra={"limit": self.max_connections_per_client, "client": host})
                transport.abort()
                return
            self._per_client[host] = held + 1
            self._counted_host = host
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._read_deadline is None:
            self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._uncount()
        super().connection_lost(exc)

    def _uncount(self) -> None:
        host, self._counted_host = self._counted_host, None
        if host is None:
            return
        left = self._per_client.get(host, 1) - 1
        if left > 0:
            self._per_client[host] = left
        else:
            self._per_client.pop(host, None)

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(self.read_timeout, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        metrics.CONNECTIONS_REFUSED.labels(reason="read_timeout").inc()
        logs.server_logger().warning("connection closed: request not received in time",
                                     extra={"read_timeout_s": self.read_timeout, "client": _peer(self.client)})
        self.transport.close()


def _peer(client: Any) -> str | None:
    return f"{client[0]}:{client[1]}" if client else None


def configure(read_timeout: float, max_connections: int, max_connections_per_client: int) -> None:
    """Apply ``--read-timeout``, ``--max-connections`` and ``--max-connections-per-client`` to this process."""
    GuardedHttpProtocol.read_timeout = read_timeout
    GuardedHttpProtocol.max_connections = max_connections
    GuardedHttpProtocol.max_connections_per_client = max_connections_per_client
