"""A real ``gpuguard scan`` process next to the e2e control plane, as the ``gpuguard-scan`` ServiceAccount.

``install_scan_identity`` applies ``deploy/scan``'s ServiceAccount and RBAC and writes a kubeconfig with a
token of that ServiceAccount, so the e2e tests prove the shipped least-privilege rules are enough.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.cluster.controlplane import ControlPlane, free_port
from tests.support.processes import scrape, stop_group

ROOT = Path(__file__).resolve().parents[2]
SCAN_DEPLOY = ROOT / "deploy" / "scan"
CRDS = ROOT / "tests" / "support" / "policyreport" / "crds.yaml"


def install_report_crds(cp: ControlPlane) -> None:
    cp.kubectl("apply", "-f", str(CRDS))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS), timeout=70)


def install_scan_identity(cp: ControlPlane, workdir: Path) -> Path:
    """The scan's ServiceAccount and RBAC from deploy/scan, and a kubeconfig acting as it."""
    cp.kubectl("create", "namespace", "gpuguard", check=False)
    for name in ("serviceaccount.yaml", "rbac.yaml"):
        cp.kubectl("apply", "-f", str(SCAN_DEPLOY / name))
    token = cp.kubectl("create", "token", "gpuguard-scan", "-n", "gpuguard", "--duration=2h").stdout.strip()
    config = json.loads(cp.kubeconfig.read_text())
    config["users"] = [{"name": "scan", "user": {"token": token}}]
    config["contexts"] = [{"name": "e2e", "context": {"cluster": "e2e", "user": "scan", "namespace": "gpuguard"}}]
    path = workdir / "scan-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


class ScanProcess:
    """``gpuguard scan`` with a config file the tests may rewrite and its /metrics on a free port."""

    def __init__(self, workdir: Path, kubeconfig: Path, config: Path, identity: str, *extra: str) -> None:
        self.workdir, self.kubeconfig, self.config, self.identity = workdir, kubeconfig, config, identity
        self.port = free_port()
        self.log = workdir / f"scan-{identity}.log"
        self.extra = extra
        self.proc: subprocess.Popen | None = None

    def start(self) -> ScanProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuguard.webhook", "scan", "--config", str(self.config), "--identity",
                 self.identity, "--metrics-host", "127.0.0.1", "--metrics-port", str(self.port), "--settle", "0.3",
                 "--lease-duration", "6", *self.extra],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self) -> None:
        stop_group(self.proc)

    def kill(self) -> None:
        """SIGKILL: no lease release, the stand-by must wait for it to expire."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` -> value of every sample on /metrics (empty while it is not up)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"gpuguard scan exited:\n{self.log.read_text()[-3000:]}")
        return scrape(f"http://127.0.0.1:{self.port}/metrics")

    def wait_metric(self, name: str, predicate, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.metrics().get(name)
            if value is not None and predicate(value):
                return value
            time.sleep(0.3)
        raise AssertionError(f"{name} = {value} after {timeout} s\n{self.log.read_text()[-3000:]}")
