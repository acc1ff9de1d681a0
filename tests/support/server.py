"""Helpers for the server tests: real certificates, a real ``gpuguard serve`` process, HTTPS clients.

The server runs as a subprocess (``python -m gpuguard.webhook serve``) so the tests exercise what
the Deployment runs: argument parsing, the TLS context uvicorn serves with, signal handling.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
from cryptography import x509

REPO = Path(__file__).resolve().parents[2]
# Bounds, not timings (issue 37): a server process on a machine whose both cores are busy took over 30 s
# to import and listen; a bound only decides how long a broken server takes to fail its test.
STARTUP_BOUND = 120.0
REQUEST_BOUND = 30.0


def issue_certs(out_dir: Path, days: int = 30) -> tuple[Path, Path, Path]:
    """(ca, cert, key) for 127.0.0.1 via the ``certs`` package; re-running issues a new leaf, same CA."""
    from gpuguard.certs import write_bundle

    paths = write_bundle(out_dir, "gpuguard", "gpuguard", ["127.0.0.1"], days)
    return paths.ca_cert, paths.tls_cert, paths.tls_key


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serial_of(pem_path: Path) -> int:
    return x509.load_pem_x509_certificate(pem_path.read_bytes()).serial_number


def served_serial(port: int, ca: Path) -> int:
    """The serial of the certificate a brand-new TLS connection to the server is given."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def run_cli(*args: str, timeout: float = 3 * STARTUP_BOUND) -> subprocess.CompletedProcess[str]:
    """``gpuguard ARGS`` as a subprocess (for startup-error tests that exit at once)."""
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(extra or {})
    return env


class Server:
    """A running ``gpuguard serve`` on 127.0.0.1 with an httpx client that trusts its CA."""

    def __init__(self, tmp: Path, ca: Path, cert: Path, key: Path, extra: list[str],
                 env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.ca, self.cert, self.key = ca, cert, key
        self.log_path = tmp / f"server-{self.port}.log"
        self._log = self.log_path.open("wb")
        cmd = [sys.executable, "-m", "gpuguard.webhook", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--tls-cert", str(cert), "--tls-key", str(key), *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=_env(env), stdout=self._log, stderr=subprocess.STDOUT)
        self.base = f"https://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.base, verify=ssl.create_default_context(cafile=str(ca)),
                                   timeout=REQUEST_BOUND)

    def wait_ready(self, timeout: float = STARTUP_BOUND) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.logs()}")
            with contextlib.suppress(httpx.TransportError):
                if self.client.get("/readyz").status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"server not ready after {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def post(self, endpoint: str, review: dict[str, Any]) -> httpx.Response:
        return self.client.post(endpoint, content=orjson.dumps(review),
                                headers={"Content-Type": "application/json"})

    def stop(self, timeout: float = 30) -> int:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


@contextlib.contextmanager
def serve(tmp: Path, *extra: str, certs_dir: Path | None = None,
          env: dict[str, str] | None = None) -> Iterator[Server]:
    ca, cert, key = issue_certs(certs_dir or tmp / "certs")
    server = Server(tmp, ca, cert, key, list(extra), env)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def review(obj: Any, operation: str = "CREATE", *, old: Any = None, dry_run: bool = False,
           sub_resource: str | None = None, uid: str | None = None) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview as the apiserver sends it."""
    api_version = obj.get("apiVersion", "v1") if isinstance(obj, dict) else "v1"
    group, _, version = api_version.rpartition("/")
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    meta = obj.get("metadata", {}) if isinstance(obj, dict) else {}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace", "default"),
        "operation": operation,
        "userInfo": {"username": "alice@example.com", "uid": "u-1",
                     "groups": ["ml-team", "system:authenticated"], "extra": {"token-ish": ["never-logged"]}},
        "object": obj if operation != "DELETE" else None,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response.get("patchType") == "JSONPatch", response
    return orjson.loads(base64.b64decode(response["patch"]))


def gpu_job(name: str = "train", gpus: int = 2, *, volumes: list[dict] | None = None,
            mounts: list[dict] | None = None) -> dict[str, Any]:
    """A batch/v1 Job asking for GPUs; without ``volumes`` it has nowhere persistent to checkpoint."""
    container: dict[str, Any] = {
        "name": "trainer",
        "image": "ghcr.io/example/trainer:1.0",
        "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"},
                      "requests": {"cpu": "8", "memory": "64Gi"}},
    }
    if mounts:
        container["volumeMounts"] = mounts
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
    }


def metric_value(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of one sample in Prometheus text output (0 when absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        sample, _, value = line.rpartition(" ")
        metric, _, label_text = sample.partition("{")
        if metric != name:
            continue
        found = dict(part.split("=", 1) for part in label_text.rstrip("}").split(",") if part)
        found = {k: v.strip('"') for k, v in found.items()}
        if all(found.get(k) == v for k, v in (labels or {}).items()):
            return float(value)
    return 0.0
