"""Starting and stopping ``gpuguard serve``: clear startup errors, dev certs, SIGTERM, workers."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support.server import (
    REPO,
    STARTUP_BOUND,
    _env,
    free_port,
    gpu_job,
    issue_certs,
    metric_value,
    review,
    run_cli,
    serve,
)

pytestmark = pytest.mark.timeout(600)  # a bound for a hung server, far above a busy machine's slowest run


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("gpuguard: error: ")]
    assert lines, result.stderr
    return lines[0]


def test_bad_config_exits_2_with_file_and_line(tmp_path: Path) -> None:
    _, cert, key = issue_certs(tmp_path / "certs")
    config = tmp_path / "bad.yaml"
    config.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nfailureMode: sometimes\n")
    line = _error_line(run_cli("serve", "--config", str(config), "--tls-cert", str(cert),
                               "--tls-key", str(key)))
    assert f"{config}:3:" in line and "failureMode" in line


def test_missing_or_mismatched_certs_are_explained(tmp_path: Path) -> None:
    _, cert, key = issue_certs(tmp_path / "a")
    _, other_cert, _ = issue_certs(tmp_path / "b")
    missing = _error_line(run_cli("serve", "--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", str(key)))
    assert "TLS certificate file not found" in missing and "nope.crt" in missing
    assert "--dev-certs" in _error_line(run_cli("serve"))
    assert "go together" in _error_line(run_cli("serve", "--tls-cert", str(cert)))
    mismatch = _error_line(run_cli("serve", "--tls-cert", str(other_cert), "--tls-key", str(key)))
    assert "not a usable pair" in mismatch


def test_dev_certs_are_issued_and_sigterm_finishes_in_flight_reviews(tmp_path: Path) -> None:
    """A review whose body is still arriving when SIGTERM lands is answered before the exit."""
    port, dev = free_port(), tmp_path / "dev"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "gpuguard.webhook", "serve", "--dev-certs", str(dev), "--host",
                             "127.0.0.1", "--port", str(port)], cwd=REPO, env=_env(), stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_BOUND
        verify = ssl.create_default_context
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"https://127.0.0.1:{port}/readyz",
                             verify=verify(cafile=str(dev / "ca.crt"))).status_code == 200:
                    break
            except (httpx.TransportError, FileNotFoundError, ssl.SSLError):
                time.sleep(0.1)

        body = orjson.dumps(review(gpu_job()))
        head = (f"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        ctx = ssl.create_default_context(cafile=str(dev / "ca.crt"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(head + body[:100])
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert proc.poll() is None  # still waiting for our review
            tls.sendall(body[100:])
            reply = b""
            while chunk := tls.recv(65536):
                reply += chunk
        status_line, _, rest = reply.partition(b"\r\n")
        assert status_line == b"HTTP/1.1 200 OK", reply[:200]
        answer = orjson.loads(rest.partition(b"\r\n\r\n")[2])
        assert answer["response"]["allowed"] is False
        # uvicorn re-raises the signal once shutdown is complete: the exit status says SIGTERM.
        assert proc.wait(30) in (0, -signal.SIGTERM)
        assert "Finished server process" in (tmp_path / "serve.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_workers_share_the_port_and_aggregate_metrics(tmp_path: Path) -> None:
    prom = tmp_path / "prom"
    prom.mkdir()
    with serve(tmp_path, "--workers", "2", env={"PROMETHEUS_MULTIPROC_DIR": str(prom)}) as server:
        verify = ssl.create_default_context(cafile=str(server.ca))
        for _ in range(6):
            with httpx.Client(base_url=server.base, verify=verify) as fresh:
                assert fresh.post("/validate", json=review(gpu_job())).json()["response"]["allowed"] is False
        text = server.client.get("/metrics").text
        assert metric_value(text, "gpuguard_admission_requests_total",
                            {"endpoint": "validate", "kind": "Job", "decision": "denied"}) == 6
        assert metric_value(text, "gpuguard_cert_expiry_timestamp_seconds") > 1.7e9
