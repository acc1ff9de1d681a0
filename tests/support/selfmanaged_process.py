"""``gpuguard serve --self-managed-certs`` next to the e2e control plane, as its ServiceAccount.

The server runs with a token of the ServiceAccount the chart installs (``kubectl create token``),
so the RBAC the chart grants is what the test proves; it listens on 127.0.0.1 and its certificate
names that IP (``--self-managed-host``), for webhooks registered by URL (the chart's ``webhook.url``).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.cluster.controlplane import ControlPlane, free_port
from tests.support.processes import stop_group

ROOT = Path(__file__).resolve().parents[2]


def service_account_kubeconfig(cp: ControlPlane, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding a one-hour token of ``namespace/account``, in that namespace."""
    token = cp.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": "e2e", "cluster": {"server": cp.server, "certificate-authority": str(cp.ca_file)}}],
              "users": [{"name": account, "user": {"token": token}}],
              "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": account, "namespace": namespace}}],
              "current-context": "sa"}
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


class SelfManagedServer:
    """One replica: ``gpuguard serve --self-managed-certs SECRET`` on its own port."""

    def __init__(self, workdir: Path, kubeconfig: Path, config: Path, port: int | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.kubeconfig = kubeconfig
        self.config = config
        self.port = port or free_port()
        self.extra_args = extra_args
        self.log = workdir / "gpuguard.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuguard.webhook", "serve", "--config", str(self.config),
                 "--self-managed-certs", "gpuguard-certs", "--self-managed-host", "127.0.0.1",
                 "--self-managed-dir", str(self.workdir / "tls"), "--kubeconfig", str(self.kubeconfig),
                 "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready():
                return
            time.sleep(0.3)
        raise AssertionError(f"gpuguard serve --self-managed-certs not ready:\n{self.tail()}")

    def ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"gpuguard serve exited ({self.proc.returncode}):\n{self.tail()}")
        context = ssl._create_unverified_context()  # a readiness poll: trust is what the tests check
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def served_pem(self) -> str:
        """The certificate a new connection gets now."""
        return ssl.get_server_certificate(("127.0.0.1", self.port), timeout=5)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def stop(self) -> None:
        stop_group(self.proc)
