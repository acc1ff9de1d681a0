"""Kyverno's admission controller as a local process against the e2e control plane.

Why out of cluster: the benchmark control plane has no kubelet, so Kyverno runs like gpuguard
does there -- a process on 127.0.0.1 that the apiserver calls by URL.  Kyverno registers its own
webhook configurations (``--serverIP=127.0.0.1:PORT`` makes their URL loopback and puts the IP
in its self-made certificate) and fills the resource webhooks' rules about a second after a
ClusterPolicy is applied; this module only starts it with the Helm chart's usual flags, pins it
like gpuguard, reads its metrics and cleans up what it leaves behind (its webhook
configurations survive it).  Binaries come from ``bench/peers/build_kyverno.sh``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

KYVERNO_VERSION = os.environ.get("KYVERNO_VERSION", "v1.15.2")
PEERS = Path(__file__).resolve().parent
POLICY_DIR = PEERS / "kyverno"
BUILD_SCRIPT = PEERS / "build_kyverno.sh"
CACHE = Path(os.environ.get("GPUGUARD_PEERS_CACHE", Path.home() / ".cache" / "gpuguard-peers")) \
    / f"kyverno-{KYVERNO_VERSION}"
# Folders of Kyverno's config/crds (in its Go module, not in this tree): 7 + 6 + 2 + 2 CRDs at v1.15.2.
CRD_GROUPS = ("kyverno", "policies.kyverno.io", "reports", "policyreport")
NAMESPACE = "kyverno"
SERVICE = "kyverno-svc"
# What --check-paths checks (bench/_paths.py); path_problems() below checks CRD_GROUPS in Kyverno's module.
NEEDS = (PEERS, POLICY_DIR, BUILD_SCRIPT)
EXTERNAL_NAMES = CRD_GROUPS

# The Helm chart's admission-controller arguments (charts/kyverno values.yaml "features" and
# "admissionController" defaults of v1.15.2), minus what only makes sense in a pod.
CHART_FLAGS = (
    "--resyncPeriod=15m", "--crdWatcher=false", "--disableMetrics=false", "--otelConfig=prometheus",
    "--admissionReports=true", "--maxAdmissionReports=1000", "--autoUpdateWebhooks=true",
    "--enableConfigMapCaching=true", "--enableDeferredLoading=true", "--dumpPayload=false",
    "--forceFailurePolicyIgnore=false", "--generateValidatingAdmissionPolicy=true",
    "--generateMutatingAdmissionPolicy=false", "--dumpPatches=false", "--maxAPICallResponseLength=2000000",
    "--loggingFormat=text", "--v=2", "--omitEvents=PolicyApplied,PolicySkipped", "--enablePolicyException=false",
    "--protectManagedResources=false", "--allowInsecureRegistry=false",
    "--registryCredentialHelpers=default,google,amazon,azure,github", "--enableTuf=false",
    "--enableReporting=validate,mutate,mutateExisting,imageVerify,generate", "--servicePort=443",
)


class KyvernoUnavailable(RuntimeError):
    """Kyverno cannot be built here (no Go): the caller skips its scenario and says why."""


def binaries(build: bool = True) -> tuple[Path, Path]:
    """``(kubectl-kyverno, kyverno)`` from the cache, building them first if asked (minutes, cold)."""
    cli, controller = CACHE / "kubectl-kyverno", CACHE / "kyverno"
    if cli.exists() and controller.exists():
        return cli, controller
    if not build:
        raise KyvernoUnavailable(f"Kyverno {KYVERNO_VERSION} is not built; run bash {BUILD_SCRIPT}")
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], check=False)
    if proc.returncode == 3:
        raise KyvernoUnavailable("Go is missing: the Kyverno comparison is skipped (see bench/peers/build_kyverno.sh)")
    if proc.returncode != 0 or not controller.exists():
        raise RuntimeError(f"{BUILD_SCRIPT} failed ({proc.returncode})")
    return cli, controller


def _module_path() -> Path | None:
    """Where Kyverno's module is (or would be) in the Go module cache; None when that is unknown."""
    cache = os.environ.get("GOMODCACHE", "")
    if not cache and (go := shutil.which("go") or shutil.which("/usr/local/go/bin/go")):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            cache = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True, check=True,
                                   timeout=30).stdout.strip()
    return Path(cache) / "github.com" / "kyverno" / f"kyverno@{KYVERNO_VERSION}" if cache else None


def module_dir() -> Path:
    """Kyverno's module directory in the Go module cache (its CRDs live there)."""
    path = _module_path()
    if path is None or not path.exists():
        raise KyvernoUnavailable(f"{path or 'Kyverno ' + KYVERNO_VERSION + ' module'} missing: run bash {BUILD_SCRIPT}")
    return path


def crd_dirs(module: Path) -> list[Path]:
    """The CRD folders ``install_crds`` applies, in Kyverno's module ``module``."""
    return [module / "config" / "crds" / group for group in CRD_GROUPS]


def path_problems() -> list[str]:
    """For --check-paths: every CRD folder exists in Kyverno's module, when the module is downloaded.

    The module comes with the first step of ``build_kyverno.sh`` (``go mod download``, seconds; no
    build); without it only the names are checked (bench/_paths.py: EXTERNAL_NAMES).
    """
    module = _module_path()
    if module is None or not module.is_dir():
        print(f"check-paths: note: Kyverno {KYVERNO_VERSION}'s module is not downloaded; CRD_GROUPS checked by "
              f"name only (go mod download github.com/kyverno/kyverno@{KYVERNO_VERSION} to check the folders)")
        return []
    return [f"CRD_GROUPS: {path.name!r}: no folder {path} in Kyverno {KYVERNO_VERSION}'s module"
            for path in crd_dirs(module) if not path.is_dir()]


def policy_files() -> list[Path]:
    """The translated ClusterPolicies, one file per gpuguard policy."""
    return sorted(POLICY_DIR.glob("*.yaml"))


def policies_text() -> str:
    """All translated ClusterPolicies as one multi-document YAML stream."""
    return "\n---\n".join(p.read_text() for p in policy_files())


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Kyverno:
    """One Kyverno admission controller process (started in its own session, stopped by its pid)."""

    def __init__(self, cp: Any, workdir: Path, cpu: int | None) -> None:
        self.cp, self.workdir, self.cpu = cp, workdir, cpu
        self.port, self.metrics_port, self.runtime_metrics_port = _free_port(), _free_port(), _free_port()
        self.log = workdir / "kyverno.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def install_crds(self) -> None:
        """Its namespace and 17 CRDs (server-side apply: some are too large for the last-applied annotation)."""
        self.cp.kubectl("create", "namespace", NAMESPACE)
        for crds in crd_dirs(module_dir()):
            self.cp.kubectl("apply", "--server-side", "-f", str(crds), timeout=120)
        for attempt in range(10):  # a CRD created a moment ago may have no status yet: kubectl wait errors
            try:
                self.cp.kubectl("wait", "--for=condition=Established", "--timeout=90s", "crd", "--all", timeout=120)
                return
            except Exception:
                if attempt == 9:
                    raise
                time.sleep(2)

    def start(self, timeout: float = 120) -> None:
        _cli, controller = binaries(build=False)
        argv = [str(controller), f"--kubeconfig={self.cp.kubeconfig}", f"--serverIP=127.0.0.1:{self.port}",
                f"--webhookServerPort={self.port}", f"--caSecretName={SERVICE}.{NAMESPACE}.svc.kyverno-tls-ca",
                f"--tlsSecretName={SERVICE}.{NAMESPACE}.svc.kyverno-tls-pair", f"--metricsPort={self.metrics_port}",
                f"--controllerRuntimeMetricsAddress=127.0.0.1:{self.runtime_metrics_port}", *CHART_FLAGS]
        if self.cpu is not None and shutil.which("taskset") and (os.cpu_count() or 1) > self.cpu:
            argv = ["taskset", "-c", str(self.cpu), *argv]
        env = {**os.environ, "KYVERNO_NAMESPACE": NAMESPACE, "KYVERNO_POD_NAME": "kyverno-bench-0",
               "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
               "KYVERNO_DEPLOYMENT": "kyverno-admission-controller", "KYVERNO_SVC": SERVICE,
               "INIT_CONFIG": "kyverno", "METRICS_CONFIG": "kyverno-metrics"}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # readiness only; the apiserver verifies
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kyverno exited:\n{self.log.read_text(errors='replace')[-3000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"https://127.0.0.1:{self.port}/health/readiness", context=ctx, timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"kyverno not ready after {timeout:.0f} s; log: {self.log}")

    def stop(self) -> None:
        """SIGTERM then SIGKILL its own process group, then delete the webhook configurations it leaves."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
                names = self.cp.kubectl("get", kind, "-o", "name").split()
                doomed = [n for n in names if n.split("/", 1)[1].startswith("kyverno-")]
                if doomed:
                    self.cp.kubectl("delete", *doomed, "--ignore-not-found")

    def webhook_settings(self) -> list[dict[str, Any]]:
        """failurePolicy, reinvocationPolicy and timeout of Kyverno's resource webhooks, as registered."""
        out = []
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for item in self.cp.kubectl_json("get", kind).get("items", []):
                if not item["metadata"]["name"].startswith("kyverno-resource"):
                    continue
                for hook in item.get("webhooks", []):
                    out.append({"configuration": item["metadata"]["name"], "webhook": hook["name"],
                                "failurePolicy": hook.get("failurePolicy"),
                                "reinvocationPolicy": hook.get("reinvocationPolicy"),
                                "timeoutSeconds": hook.get("timeoutSeconds"),
                                "rules": sum(len(r.get("resources", [])) for r in hook.get("rules") or [])})
        return out

    def metrics(self) -> dict[str, tuple[float, int]]:
        """``kyverno_admission_review_duration_seconds`` sum/count by request kind (its server-side time)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        out: dict[str, tuple[float, int]] = {}
        pattern = re.compile(r'^kyverno_admission_review_duration_seconds_(sum|count)\{([^}]*)\} (\S+)$')
        for line in text.splitlines():
            m = pattern.match(line)
            if not m:
                continue
            field, raw, value = m.groups()
            labels = dict(re.findall(r'(\w+)="([^"]*)"', raw))
            if labels.get("resource_request_operation", "create").lower() != "create":
                continue
            key = labels.get("resource_kind", "?")
            total, count = out.get(key, (0.0, 0))
            out[key] = (total + float(value), count) if field == "sum" else (total, count + int(float(value)))
        return out
