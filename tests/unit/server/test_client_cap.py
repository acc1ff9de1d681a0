"""One client address holding many idle TLS connections can't lock other clients (the apiserver) out.

A real ``gpuguard serve`` with a small cap (8 connections, 4 per client address): a hostile
client on 127.0.0.2 opens more idle connections than the whole cap and sends nothing; a fresh
client on 127.0.0.1 is still answered.  Without the per-client cap the hostile connections take
the whole cap and the fresh client's connection is closed as it is made.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from pathlib import Path

from tests.support.server import STARTUP_BOUND, gpu_job, metric_value, review, serve

CAP, PER_CLIENT = 8, 4
HOSTILE = "127.0.0.2"  # Linux routes all of 127.0.0.0/8 to loopback: a second client address


def _idle_tls(port: int, ca: Path, source: str) -> ssl.SSLSocket | None:
    """A TLS connection from ``source`` that sends nothing; ``None`` when the server refused it at once."""
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    try:
        return ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    except (ssl.SSLError, ConnectionError):
        raw.close()
        return None


def _refused_for_client_cap(server) -> float:
    return metric_value(server.client.get("/metrics").text, "gpuguard_connections_closed_total",
                        {"reason": "client_cap"})


def test_idle_connections_from_one_address_leave_capacity_for_others(tmp_path):
    with serve(tmp_path, "--max-connections", str(CAP), "--max-connections-per-client", str(PER_CLIENT),
               "--read-timeout", "60") as server:
        hostile = [_idle_tls(server.port, server.ca, HOSTILE) for _ in range(CAP + 2)]
        try:
            # Wait (bounded) until the server has seen every handshake: the ones over the per-client cap
            # are counted as closed for it.
            deadline = time.monotonic() + STARTUP_BOUND
            while _refused_for_client_cap(server) < CAP + 2 - PER_CLIENT and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _refused_for_client_cap(server) == CAP + 2 - PER_CLIENT
            # A fresh client (another address) is answered: new connections, a real review.
            server.client.close()
            with server.client.__class__(base_url=server.base, verify=ssl.create_default_context(
                    cafile=str(server.ca)), timeout=10) as fresh:
                for _ in range(3):
                    response = fresh.post("/validate", json=review(gpu_job()),
                                          headers={"Connection": "close"})
                    assert response.status_code == 200
                    assert response.json()["response"]["uid"]
        finally:
            for sock in hostile:
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
        assert "too many open connections from one client" in server.logs()
