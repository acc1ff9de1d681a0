"""A real ``gpuguard serve`` next to the e2e control plane, registered with the apiserver.

Certificates come from ``gpuguard certs create --ip 127.0.0.1`` and the webhook
configurations from ``gpuguard webhook-config --url ...``, applied with kubectl: the same
commands the docs give admins, so the e2e suite proves them too.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.cluster.controlplane import ControlPlane, free_port
from tests.support.processes import scrape, stop_group

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "policies" / "default-config.yaml"


def gpuguard(*args: str, env: dict | None = None, check: bool = True, timeout: float = 60,
             stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout, input=stdin)
    if check and proc.returncode != 0:
        raise AssertionError(f"gpuguard {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


class GpuguardServer:
    """``gpuguard serve`` over TLS on 127.0.0.1, with a config file the tests may rewrite."""

    def __init__(self, workdir: Path, config_text: str, kubeconfig: Path | None = None,
                 extra_args: tuple[str, ...] = ()):
        self.workdir = workdir
        self.extra_args = extra_args  # e.g. ("--dra-claims", "--kubeconfig", KUBECONFIG)
        self.certs = workdir / "certs"
        self.config = workdir / "config.yaml"
        self.config.write_text(config_text)
        self.log = workdir / "gpuguard.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.kubeconfig = kubeconfig  # lets the server read the workloads `kubectl scale` scales
        gpuguard("certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", str(self.certs),
                 "--ip", "127.0.0.1")

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> Path:
        return self.certs / "ca.crt"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gpuguard.webhook", "serve", "--config", str(self.config),
                 "--tls-cert", str(self.certs / "tls.crt"), "--tls-key", str(self.certs / "tls.key"),
                 "--host", "127.0.0.1", "--port", str(self.port), "--reload-interval", "0.5",
                 *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else []), *self.extra_args],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gpuguard serve exited:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"gpuguard serve not ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_group(self.proc)

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` -> value of every sample on the server's /metrics."""
        return scrape(f"{self.url}/metrics", ssl.create_default_context(cafile=str(self.ca)))

    def log_count(self, text: str) -> int:
        return self.log.read_text(errors="replace").count(text)

    def register(self, cp: ControlPlane, failure_policy: str = "Fail") -> None:
        manifest = gpuguard("webhook-config", "--url", self.url, "--ca", str(self.ca), "--failure-policy",
                            failure_policy, "--config", str(self.config)).stdout  # its kinds and profiles
        cp.kubectl("apply", "-f", "-", input=manifest)


@contextlib.contextmanager
def in_force(cp: ControlPlane, workdir: Path, config_text: str, ready: Callable[[], Any],
             kubeconfig: Path | None = None) -> Iterator[GpuguardServer]:
    """A gpuguard server registered with ``cp`` until the block ends, yielded once ``ready()`` is true (a probe
    through the apiserver that only gpuguard's webhooks can pass); its log's path is printed at the end."""
    server = GpuguardServer(workdir, config_text, kubeconfig=kubeconfig)
    server.start()
    try:
        server.register(cp)
        cp.wait_for(ready, timeout=60, message="gpuguard's webhooks in force")
        yield server
    finally:
        server.stop()
        print(f"\n[e2e] gpuguard log: {server.log}")


def server_identity(cp: ControlPlane, workdir: Path) -> Path:
    """gpuguard's ServiceAccount and ClusterRole from deploy/base, and a kubeconfig acting as it: the server reads
    the cluster with the RBAC it ships with, not the admin's token."""
    cp.kubectl("create", "namespace", "gpuguard", check=False)
    for name in ("serviceaccount.yaml", "rbac.yaml"):
        cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / name))
    token = cp.kubectl("create", "token", "gpuguard", "-n", "gpuguard", "--duration=2h").stdout.strip()
    config = json.loads(cp.kubeconfig.read_text())
    config["users"] = [{"name": "gpuguard", "user": {"token": token}}]
    config["contexts"] = [{"name": "e2e", "context": {"cluster": "e2e", "user": "gpuguard"}}]
    path = workdir / "gpuguard-kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def default_config_with(extra_exempt_namespace: str, grants: str = "inference, notebook") -> str:
    """The shipped default config, with one more exempt namespace for the exemption test.

    ``grants``: the privileged workload classes every namespace is granted (workload-class
    ``allowEscalationTo``): these suites' namespaces stand for serving and notebook teams' (GPU
    Deployments as model servers); ``""`` keeps the shipped default, where nothing is granted.
    """
    text = DEFAULT_CONFIG.read_text()
    marker = "namespaces: [kube-system, kube-node-lease, kube-public, gpuguard]"
    assert marker in text, "the default config's exemption line changed; update the e2e helper"
    grant_marker = "    # allowEscalationTo: []"
    assert grant_marker in text, "the default config's workload-class grant line changed; update the e2e helper"
    return text.replace(marker, f"namespaces: [kube-system, kube-node-lease, kube-public, gpuguard, "
                                f"{extra_exempt_namespace}]").replace(
        grant_marker, f"    allowEscalationTo: [{grants}]")


def copy_logs(server: GpuguardServer, dest: Path) -> None:
    if server.log.exists():
        shutil.copy(server.log, dest / "gpuguard.log")
