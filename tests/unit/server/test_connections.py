"""What only the network layer does, against a real ``gpuguard serve`` over TLS: read deadline,
connection cap, keep-alive, TLS 1.2 ciphers, a client leaving mid-body, a taken port."""

from __future__ import annotations

import socket
import ssl
import time
from pathlib import Path

import orjson
import pytest

from tests.support.server import gpu_job, issue_certs, review, run_cli, serve


def _tls(port: int, ca: Path, **kwargs) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(ca))
    for name, value in kwargs.items():
        setattr(ctx, name, value)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def _closed_within(sock: ssl.SSLSocket, seconds: float) -> float:
    """Seconds until the server closed ``sock`` (an empty read or a reset), failing after ``seconds``."""
    started = time.monotonic()
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except TimeoutError:
        pytest.fail(f"connection still open after {seconds} s")
    return time.monotonic() - started


def _request_head(length: int) -> bytes:
    return (f"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conn")
    with serve(tmp, "--read-timeout", "1", "--max-connections", "4", "--keep-alive-timeout", "3") as srv:
        yield srv


@pytest.mark.parametrize("sent", [b"", b"POST /valid", b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Le",
                                  _request_head(1000) + b'{"apiVersion":'])
def test_a_request_not_sent_in_time_is_dropped(server, sent):
    with _tls(server.port, server.ca) as sock:
        sock.sendall(sent)
        assert _closed_within(sock, 8) < 6


def test_keep_alive_connection_serves_several_reviews_then_idles_out(server):
    body = orjson.dumps(review(gpu_job()))
    with _tls(server.port, server.ca) as sock:
        for request in range(3):
            if request:
                time.sleep(1.5)  # longer than the read timeout: idle between requests is keep-alive's business
            sock.sendall(_request_head(len(body)) + body)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}}"):
                reply += sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200")
        # Measured from the last reply (not after a sleep a busy machine may stretch past the 3 s keep-alive):
        # closed by the keep-alive timeout, not by the 1 s read timeout.
        assert _closed_within(sock, 10) > 1


def _answered_connection(server, timeout: float = 15) -> ssl.SSLSocket:
    """A connection the server answers /healthz on.  One it closes because it still counts a connection
    the client just closed (a busy server may take a while to notice) is tried again, until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        reply = b""
        sock = None
        try:
            sock = _tls(server.port, server.ca)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = sock.recv(4096)
        except OSError:  # ssl.SSLError, ConnectionResetError: closed by the server
            pass
        if reply.startswith(b"HTTP/1.1 200"):
            return sock
        if sock is not None:
            sock.close()
        assert time.monotonic() < deadline, f"no connection answered within {timeout} s: {reply!r}"
        time.sleep(0.1)


def test_connections_beyond_the_cap_are_closed(server):
    server.client.close()  # its keep-alive connection would count against the cap until the server sees it go
    held = []
    try:
        for _ in range(4):
            held.append(_answered_connection(server))
        earlier = len(server.logs())  # only the extra connection's refusal counts below
        extra = _tls(server.port, server.ca)
        with extra:
            assert _closed_within(extra, 5) < 4
    finally:
        for sock in held:
            sock.close()
    assert "too many open connections" in server.logs()[earlier:]


def test_client_leaving_mid_body_is_one_clean_log_line(server):
    # Only this test's lines: on a busy machine an earlier test's half-sent body may also end as a
    # disconnect (the client closing before the server's read timeout), which is that test's line.
    earlier = len(server.logs())
    with _tls(server.port, server.ca) as sock:
        sock.sendall(_request_head(5000) + b'{"apiVersion":"admission.k8s.io/v1"')
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while "client disconnected mid-request" not in server.logs()[earlier:] and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # a second line for the same disconnect would come right after the first
    logs = server.logs()[earlier:]
    assert logs.count("client disconnected mid-request") == 1
    assert "Traceback" not in logs and "Exception in ASGI application" not in logs


def test_tls12_offers_only_ecdhe_aead_suites(server):
    with _tls(server.port, server.ca, maximum_version=ssl.TLSVersion.TLSv1_2) as sock:
        name, version, _ = sock.cipher()
        assert version == "TLSv1.2" and name.startswith("ECDHE-") and ("GCM" in name or "CHACHA20" in name)
    for cbc in ("ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA", "ECDHE-ECDSA-AES128-SHA256",
                "ECDHE-RSA-AES128-SHA", "AES128-GCM-SHA256"):
        with pytest.raises(ssl.SSLError):
            _connect_with_ciphers(server.port, server.ca, cbc)


def _connect_with_ciphers(port: int, ca: Path, ciphers: str) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
        pass


def test_port_in_use_is_one_line_and_exit_2(tmp_path: Path):
    _, cert, key = issue_certs(tmp_path / "certs")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_cli("serve", "--tls-cert", str(cert), "--tls-key", str(key), "--host", "127.0.0.1",
                         "--port", str(port))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"gpuguard: error: cannot listen on 127.0.0.1:{port}: Address already in use"]
