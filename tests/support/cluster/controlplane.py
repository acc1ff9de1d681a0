"""A real, throw-away Kubernetes control plane on loopback for gpuguard's end-to-end tests.

Why a real one: admission webhooks are only meaningfully tested against the real apiserver's
admission chain (defaulting, mutating webhooks, schema validation, validating webhooks, VAP,
``--dry-run=server``, warnings returned to kubectl).  We run etcd, kube-apiserver and
kube-controller-manager (so Jobs create Pods) as plain processes on free 127.0.0.1 ports; there is
no kubelet and, by default, no scheduler, so Pods stay Pending, which is all admission tests need.
``ControlPlane(scheduler=True)`` also runs the real kube-scheduler, and :meth:`ControlPlane.add_node`
makes Node objects it binds pods to (``spec.nodeName``), for tests that ask what the scheduler does.

The Kubernetes binaries are built from the Go module proxy by ``build.sh`` beside this file and
cached outside the repo (``$GPUGUARD_E2E_CACHE``, default ``~/.cache/gpuguard-e2e/<version>/``).
etcd is Debian's ``etcd-server`` (``/usr/bin/etcd``) or one built into the same cache.

Usage::

    with ControlPlane() as cp:
        cp.kubectl("create", "namespace", "t1")
        print(cp.kubectl("get", "ns", "-o", "name").stdout)
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gpuguard.certs import create_ca, issue_serving_cert

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
CRDS_DIR = HERE / "crds"

#: Kubernetes release built by build.sh; keep the two defaults in step.
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.33.13")
KUBECTL = os.environ.get("GPUGUARD_KUBECTL", "/usr/bin/kubectl")
SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or reached; the message points at the logs."""


class KubectlError(subprocess.CalledProcessError):
    """A failed kubectl call whose ``str()`` shows the command's stderr, so test failures are readable."""

    def __str__(self) -> str:
        args = self.cmd if isinstance(self.cmd, str) else " ".join(map(str, self.cmd))
        return f"kubectl exited {self.returncode}: {args}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


# --------------------------------------------------------------------------- binaries


def cache_dir() -> Path:
    """Where build.sh puts the binaries for ``K8S_VERSION`` (outside the repo, never committed)."""
    root = os.environ.get("GPUGUARD_E2E_CACHE") or str(Path.home() / ".cache" / "gpuguard-e2e")
    return Path(root) / K8S_VERSION


@dataclass(frozen=True)
class Binaries:
    """Paths of the executables a control plane needs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kubectl: Path


def _find_etcd() -> Path | None:
    """Prefer an etcd built into the cache (matches the pinned version), else one on PATH (Debian's)."""
    cached = cache_dir() / "etcd"
    if cached.is_file() and os.access(cached, os.X_OK):
        return cached
    found = shutil.which("etcd")
    return Path(found) if found else None


def _binaries() -> Binaries | None:
    d = cache_dir()
    api, kcm, sched, etcd = (d / "kube-apiserver", d / "kube-controller-manager", d / "kube-scheduler",
                             _find_etcd())
    kubectl = Path(KUBECTL) if os.access(KUBECTL, os.X_OK) else None
    if kubectl is None and (w := shutil.which("kubectl")):
        kubectl = Path(w)
    if api.is_file() and kcm.is_file() and sched.is_file() and etcd is not None and kubectl is not None:
        return Binaries(api, kcm, sched, etcd, kubectl)
    return None


def binaries_available() -> tuple[bool, str]:
    """Whether every binary is present now (no build needed); the reason names what is missing.

    Tests call this to decide between running, building first, or skipping with a useful message.
    """
    if _binaries() is not None:
        return True, f"binaries cached in {cache_dir()}"
    missing = [
        name
        for name, present in (
            ("kube-apiserver", (cache_dir() / "kube-apiserver").is_file()),
            ("kube-controller-manager", (cache_dir() / "kube-controller-manager").is_file()),
            ("kube-scheduler", (cache_dir() / "kube-scheduler").is_file()),
            ("etcd", _find_etcd() is not None),
            ("kubectl", os.access(KUBECTL, os.X_OK) or shutil.which("kubectl") is not None),
        )
        if not present
    ]
    return False, f"missing {', '.join(missing)} (cache {cache_dir()})"


def can_build() -> tuple[bool, str]:
    """Whether build.sh can produce the missing binaries here (it needs Go; kubectl is never built)."""
    if not (os.access(KUBECTL, os.X_OK) or shutil.which("kubectl")):
        return False, f"kubectl not found at {KUBECTL} or on PATH"
    if shutil.which("go") is None and not os.access("/usr/local/go/bin/go", os.X_OK):
        return False, ("Go is not installed, so kube-apiserver, kube-controller-manager and kube-scheduler "
                       "cannot be built.")
    return True, "Go found; build.sh can build the binaries"


def ensure_binaries(verbose: bool = True, timeout: float | None = None) -> Binaries:
    """Return the binaries, running build.sh first if any is missing.

    build.sh's output is streamed line by line (to stderr when ``verbose``) and also kept in
    ``<cache>/build.log``, because a cold build takes many minutes and silence looks like a hang.
    A file lock serialises concurrent callers (e.g. parallel pytest workers) so only one builds.
    """
    found = _binaries()
    if found is not None:
        return found
    ok, why = can_build()
    if not ok:
        raise ControlPlaneError(why)
    if timeout is None:
        timeout = float(os.environ.get("GPUGUARD_E2E_BUILD_TIMEOUT", "3600"))
    root = cache_dir().parent
    root.mkdir(parents=True, exist_ok=True)
    build_log = cache_dir().parent / f"build-{K8S_VERSION}.log"
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _binaries()  # another process may have finished the build while we waited
        if found is not None:
            return found
        env = {**os.environ, "K8S_VERSION": K8S_VERSION}
        tail: list[str] = []
        deadline = time.monotonic() + timeout
        with open(build_log, "w") as log:
            proc = subprocess.Popen(
                ["bash", str(BUILD_SCRIPT)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
            )
            assert proc.stdout is not None
            try:
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    tail = [*tail[-39:], line.rstrip("\n")]
                    if verbose:
                        print(line, end="", file=sys.stderr, flush=True)
                    if time.monotonic() > deadline:
                        raise ControlPlaneError(f"build.sh exceeded {timeout:.0f} s; log: {build_log}")
                rc = proc.wait()
            finally:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if rc != 0:
            raise ControlPlaneError(f"build.sh failed (exit {rc}); full log: {build_log}\n" + "\n".join(tail[-25:]))
    found = _binaries()
    if found is None:
        missing = binaries_available()[1]
        raise ControlPlaneError(f"build.sh succeeded but binaries are still missing: {missing}")
    return found


# --------------------------------------------------------------------------- helpers


PORT_ATTEMPTS = 3  # start-ups tried when a component finds its port taken


def _port_taken(exc: BaseException, logs_dir: Path) -> bool:
    """Whether a start-up failed because a component could not bind its port."""
    if not isinstance(exc, ControlPlaneError | TimeoutError) or not logs_dir.is_dir():
        return False
    return any("address already in use" in _tail(log, 40) for log in logs_dir.glob("*.log"))


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel picks it; small race accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    fn: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.5,
    message: str = "condition",
) -> T:
    """Poll ``fn`` until it returns something truthy and return that.

    Exceptions raised by ``fn`` count as "not yet" (the last one is reported), because most things
    we wait for (a port, an object, a controller) fail in assorted ways until they are ready.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - see docstring
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {message}{detail}")
        time.sleep(interval)


def _die_with_parent(argv: list[str]) -> list[str]:
    """Prefix ``argv`` so the component gets SIGKILL if the Python process that started it dies.

    Without this, a pytest killed by a CI timeout (no finalizers, no atexit) would leave etcd and
    kube-apiserver running.  util-linux's ``setpriv`` sets PR_SET_PDEATHSIG and execs, which is
    safer than ``preexec_fn`` in a process that may have threads.  Caveat of PDEATHSIG: it fires when
    the *thread* that started the child exits, so start the control plane from a long-lived thread.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def _tail(path: Path, lines: int = 30) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(data[-lines:])


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]


# --------------------------------------------------------------------------- certificates


def _write_pem(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _make_pki(d: Path) -> dict[str, Path]:
    """CA, apiserver serving cert (IP SAN 127.0.0.1) and the service-account signing key.

    EC P-256 for the TLS keys because it is fast to generate; RSA-2048 for the service-account key
    because every Kubernetes version accepts RS256 tokens.
    """
    d.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = create_ca("gpuguard-e2e-ca", days=7)
    dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
           "kubernetes.default.svc.cluster.local"]
    # 10.0.0.1 is the `kubernetes` service IP of the service CIDR the apiserver is given.
    srv_cert, srv_key = issue_serving_cert(ca_cert, ca_key, dns, ips=["127.0.0.1", "10.0.0.1"], days=7)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    paths = {
        "ca_cert": d / "ca.crt",
        "ca_key": d / "ca.key",
        "server_cert": d / "apiserver.crt",
        "server_key": d / "apiserver.key",
        "sa_key": d / "sa.key",
    }
    _write_pem(paths["ca_cert"], ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(paths["ca_key"], _key_pem(ca_key), private=True)
    _write_pem(paths["server_cert"], srv_cert.public_bytes(serialization.Encoding.PEM))
    _write_pem(paths["server_key"], _key_pem(srv_key), private=True)
    _write_pem(paths["sa_key"], _key_pem(sa_key), private=True)
    return paths


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager (+ kube-scheduler with ``scheduler=True``) on free
    loopback ports.

    Start with ``with ControlPlane() as cp:`` (or ``start()`` / ``stop()``).  Every component logs
    to ``<workdir>/logs/<name>.log``; ``stop()`` keeps the workdir so those logs survive a failed
    test (pass ``cleanup=True`` to delete it).  Any failure during ``start()`` stops what was started
    and raises :class:`ControlPlaneError` with the log tails and ``logs_dir``.
    """

    def __init__(  # noqa: PLR0913 - keyword-only options
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        controller_manager: bool = True,
        scheduler: bool = False,
        ready_timeout: float = 90.0,
        extra_apiserver_args: Sequence[str] = (),
        extra_controller_manager_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
        runtime_config: Sequence[str] = (),
        verbose: bool = True,
        cleanup: bool = False,
    ) -> None:
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="gpuguard-e2e-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "kubeconfig"
        self.token = secrets.token_hex(24)
        self.with_controller_manager = controller_manager
        self.with_scheduler = scheduler
        self.ready_timeout = ready_timeout
        # Opt-in API surface (default: none, as every other test expects): feature gates go to the
        # apiserver and the controller manager, runtime-config (e.g. resource.k8s.io/v1beta1=true) to
        # the apiserver.  1.33 needs both for DRA (resource.k8s.io) and a gate for pod-level resources.
        gates = ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted((feature_gates or {}).items()))
        self.extra_apiserver_args = ([f"--feature-gates={gates}"] if gates else []) + (
            [f"--runtime-config={','.join(runtime_config)}"] if runtime_config else []) + list(extra_apiserver_args)
        self.extra_controller_manager_args = ([f"--feature-gates={gates}"] if gates else []) + list(
            extra_controller_manager_args)
        self.scheduler_feature_gates = [f"--feature-gates={gates}"] if gates else []
        if scheduler and not any(a.startswith("--controllers") for a in self.extra_controller_manager_args):
            # No kubelet renews the Nodes' Leases: the node-lifecycle controller would mark every Node
            # unreachable and taint it after ~40-50 s, and the scheduler would stop placing pods.
            self.extra_controller_manager_args.append("--controllers=*,-nodelifecycle")
        self.scheduler_port = 0
        self.verbose = verbose
        self.cleanup = cleanup
        self.server = ""
        self.ca_file = self.workdir / "pki" / "ca.crt"
        self.ca_key_file = self.workdir / "pki" / "ca.key"
        self.binaries: Binaries | None = None
        self.etcd_url = ""
        self._etcd_data: Path | None = None
        self._procs: list[_Proc] = []
        self._started = False
        self._ssl: ssl.SSLContext | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _say(self, msg: str) -> None:
        if self.verbose:
            print(f"[controlplane] {msg}", file=sys.stderr, flush=True)

    def start(self) -> ControlPlane:
        """Bring everything up; on any failure stop it all and raise with pointers to the logs."""
        if self._started:
            return self
        self._started = True
        # Also stop on interpreter exit, in case a caller forgets or a fixture finalizer never runs.
        atexit.register(self.stop)
        t0 = time.monotonic()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self._start_components()
                break
            except BaseException as exc:
                report = self.failure_report()
                self.stop()
                self._started = False  # allow a retry
                if attempt < PORT_ATTEMPTS and _port_taken(exc, self.logs_dir):
                    # free_port() can only pick a port that is free *now*: an outgoing connection of
                    # another process may take it before the component binds it.  New ports, once more.
                    self._say(f"a port was taken before a component could bind it; starting again ({attempt})")
                    for log in self.logs_dir.glob("*.log"):  # the retry's logs tell only its own story
                        log.unlink()
                    self._started = True
                    continue
                if isinstance(exc, ControlPlaneError | TimeoutError):
                    raise ControlPlaneError(f"{exc}\n{report}") from exc
                raise
        self._say(f"ready in {time.monotonic() - t0:.1f} s: {self.server} (logs: {self.logs_dir})")
        return self

    def _start_components(self) -> None:
        self.binaries = ensure_binaries(verbose=self.verbose)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        pki = _make_pki(self.workdir / "pki")
        self._start_etcd()
        self._start_apiserver(pki)
        self._write_kubeconfig()
        if self.with_controller_manager:
            self._start_controller_manager(pki)
        if self.with_scheduler:
            self._start_scheduler()

    def stop(self) -> None:
        """Terminate every component (reverse start order), SIGKILL stragglers, keep the logs.

        Idempotent, so it is safe from ``__exit__``, a fixture finalizer and ``atexit`` alike.
        """
        atexit.unregister(self.stop)
        for proc in reversed(self._procs):
            if proc.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in reversed(self._procs):
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                proc.popen.wait()
            proc.log_file.close()
        self._procs.clear()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None
        if self.cleanup:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def failure_report(self, lines: int = 25) -> str:
        """Last lines of each component's log, plus where the full logs are."""
        parts = [f"control plane logs: {self.logs_dir}"]
        for log in sorted(self.logs_dir.glob("*.log")) if self.logs_dir.is_dir() else []:
            parts.append(f"--- {log.name} (last {lines} lines) ---\n{_tail(log, lines)}")
        return "\n".join(parts)

    # -- processes ---------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> _Proc:
        """Start a component with stdout+stderr to a log file (a pipe could fill up and block it)."""
        log_path = self.logs_dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        log_file.write(("$ " + " ".join(argv) + "\n").encode())
        log_file.flush()
        popen = subprocess.Popen(
            _die_with_parent(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            start_new_session=True,  # own process group: stop() signals only what we started
        )
        proc = _Proc(name, popen, log_path, log_file)
        self._procs.append(proc)
        return proc

    def _check_alive(self, proc: _Proc) -> None:
        rc = proc.popen.poll()
        if rc is not None:
            raise ControlPlaneError(f"{proc.name} exited with code {rc} during start-up; see {proc.log_path}")

    def _wait(self, proc: _Proc, probe: Callable[[], bool], timeout: float, what: str) -> None:
        def check() -> bool:
            self._check_alive(proc)
            return probe()

        deadline = time.monotonic() + timeout
        while True:
            try:
                if check():
                    return
            except ControlPlaneError:
                raise
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            if time.monotonic() >= deadline:
                raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.25)

    def _start_etcd(self) -> None:
        assert self.binaries is not None
        client, peer = free_port(), free_port()
        # tmpfs when available: Debian's etcd 3.4 has no --unsafe-no-fsync, and fsync on a busy
        # CI disk makes every apiserver write slow.
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.workdir
        self._etcd_data = Path(tempfile.mkdtemp(prefix="gpuguard-etcd-", dir=base))
        self.etcd_url = f"http://127.0.0.1:{client}"
        argv = [
            str(self.binaries.etcd),
            "--name=t0",
            f"--data-dir={self._etcd_data}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=t0=http://127.0.0.1:{peer}",
            "--initial-cluster-state=new",
            "--logger=zap",
            "--log-level=warn",
            "--quota-backend-bytes=1073741824",
        ]
        if self._etcd_supports("--unsafe-no-fsync"):
            argv.append("--unsafe-no-fsync")
        proc = self._spawn("etcd", argv)

        def healthy() -> bool:
            with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                return bool(json.loads(r.read()).get("health") == "true")

        self._wait(proc, healthy, 30, f"etcd health at {self.etcd_url}")
        self._say(f"etcd up at {self.etcd_url}")

    def _etcd_supports(self, flag: str) -> bool:
        assert self.binaries is not None
        out = subprocess.run(
            [str(self.binaries.etcd), "--help"], capture_output=True, text=True, timeout=20, check=False
        )
        return flag in (out.stdout + out.stderr)

    def _start_apiserver(self, pki: dict[str, Path]) -> None:
        assert self.binaries is not None
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        token_file = self.workdir / "tokens.csv"
        token_file.write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        token_file.chmod(0o600)
        cert_dir = self.workdir / "apiserver-certs"
        cert_dir.mkdir(exist_ok=True)
        argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={cert_dir}",
            f"--tls-cert-file={pki['server_cert']}",
            f"--tls-private-key-file={pki['server_key']}",
            f"--client-ca-file={pki['ca_cert']}",
            f"--token-auth-file={token_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki['sa_key']}",
            f"--service-account-signing-key-file={pki['sa_key']}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # Only ServiceAccount is removed from the default plugin list; Priority,
            # MutatingAdmissionWebhook, ValidatingAdmissionWebhook, ValidatingAdmissionPolicy ...
            # stay on, as in a real cluster.
            "--disable-admission-plugins=ServiceAccount",
            # A loopback advertise address is not valid for the `kubernetes` Endpoints.
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
            *self.extra_apiserver_args,
        ]
        proc = self._spawn("kube-apiserver", argv)
        ctx = ssl.create_default_context(cafile=str(pki["ca_cert"]))

        def ready() -> bool:
            req = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"})
            try:
                with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        self._wait(proc, ready, self.ready_timeout, f"kube-apiserver /readyz at {self.server}")
        self._say(f"kube-apiserver ready at {self.server}")

    def _write_kubeconfig(self) -> None:
        """kubeconfig with the admin token; JSON is valid YAML, and quoting paths is then free."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        self.kubeconfig.write_text(json.dumps(cfg, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    def _start_controller_manager(self, pki: dict[str, Path]) -> None:
        assert self.binaries is not None
        argv = [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            f"--service-account-private-key-file={pki['sa_key']}",
            f"--root-ca-file={pki['ca_cert']}",
            "--secure-port=0",  # no metrics/health endpoint needed; avoids a port and a cert
            # Each controller sends its requests as its own service account
            # (system:serviceaccount:kube-system:replicaset-controller …), as on kubeadm and managed
            # clusters: gpuguard trusts controllers by that identity.
            "--use-service-account-credentials=true",
            "--v=1",
            *self.extra_controller_manager_args,
        ]
        proc = self._spawn("kube-controller-manager", argv)

        # The serviceaccount controller creating `default/default` shows the controllers are running.
        def controllers_running() -> bool:
            r = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False, timeout=10)
            return r.returncode == 0

        self._wait(proc, controllers_running, 60, "kube-controller-manager (default ServiceAccount)")
        self._say("kube-controller-manager running")

    def _start_scheduler(self) -> None:
        """The real kube-scheduler, with the admin kubeconfig, serving /readyz on a loopback port."""
        assert self.binaries is not None
        self.scheduler_port = free_port()
        cert_dir = self.workdir / "scheduler-certs"  # its self-signed serving cert
        cert_dir.mkdir(exist_ok=True)
        argv = [
            str(self.binaries.kube_scheduler),
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.scheduler_port}",
            f"--cert-dir={cert_dir}",
            "--profiling=false",
            "--v=2",  # logs each binding ("Successfully bound pod to node") and each unschedulable pod
            *self.scheduler_feature_gates,
        ]
        proc = self._spawn("kube-scheduler", argv)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # its own self-signed cert; /readyz needs no credentials

        def ready() -> bool:
            url = f"https://127.0.0.1:{self.scheduler_port}/readyz"
            with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
                return r.status == 200

        self._wait(proc, ready, 60, f"kube-scheduler /readyz on 127.0.0.1:{self.scheduler_port}")
        self._say("kube-scheduler running")

    # -- nodes (for the scheduler; no kubelet runs) ---------------------------------------------

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        capacity: Mapping[str, str] | None = None,
        unschedulable: bool = False,
    ) -> None:
        """Create a Ready Node the scheduler can bind pods to.

        Three writes, as no kubelet runs: create the Node; set ``spec.taints`` again, because the
        apiserver's TaintNodesByCondition admission adds ``node.kubernetes.io/not-ready:NoSchedule`` to
        every new Node and only the node-lifecycle controller (not run with ``scheduler=True``) would
        take it off; then ``capacity``/``allocatable`` and a ``Ready`` condition through the status
        subresource (kubectl >= 1.24 has ``--subresource=status``).
        """
        obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                           "kubernetes.io/arch": "amd64", **(labels or {})},
            },
            "spec": {"taints": list(taints), **({"unschedulable": True} if unschedulable else {})},
        }
        self.request("POST", "/api/v1/nodes", obj, check=True)
        self.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": list(taints)}}, check=True)
        alloc = {"pods": "110", **(allocatable or {})}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "status": {
                "capacity": {**alloc, **(capacity or {})},
                "allocatable": alloc,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "no kubelet: made ready by the e2e harness",
                                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            }
        }
        self.request("PATCH", f"/api/v1/nodes/{name}/status", status, check=True)

    # -- the REST API, without a kubectl process per call ----------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        as_user: str | None = None,
        check: bool = False,
        timeout: float = 30,
    ) -> tuple[int, Any]:
        """One call to the apiserver with the admin token: ``(status, parsed JSON body)``.

        ``PATCH`` bodies are JSON merge patches.  ``as_user`` impersonates a user (``Impersonate-User``),
        as ``kubectl --as`` does, so admission sees that user.  Errors come back as the apiserver's
        ``Status`` object (its ``message`` holds a webhook's denial); ``check`` raises on them instead.
        """
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=str(self.ca_file))
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/merge-patch+json" if method == "PATCH" else "application/json"
        if as_user:
            headers["Impersonate-User"] = as_user
        req = urllib.request.Request(f"{self.server}{path}", data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._ssl) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        if check and status >= 300:
            raise ControlPlaneError(f"{method} {path} -> {status}: {parsed}")
        return status, parsed

    # -- client helpers ----------------------------------------------------------------------

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses (e.g. ``gpuguard audit --cluster``) pointing at this cluster."""
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig)}

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the machine's kubectl against this cluster; raises :class:`KubectlError` if ``check``."""
        kubectl = str(self.binaries.kubectl) if self.binaries else KUBECTL
        cmd = [kubectl, f"--kubeconfig={self.kubeconfig}", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False)
        if check and r.returncode != 0:
            raise KubectlError(r.returncode, cmd, r.stdout, r.stderr)
        return r

    def kubectl_json(self, *args: str, timeout: float = 60) -> Any:
        """``kubectl ... -o json`` parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def wait_for(
        self, fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.5, message: str = "condition"
    ) -> T:
        """Poll ``fn`` until truthy (see module-level :func:`wait_for`), checking components stay up."""

        def guarded() -> T:
            for proc in self._procs:
                self._check_alive(proc)
            return fn()

        try:
            return wait_for(guarded, timeout=timeout, interval=interval, message=message)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}\ncontrol plane logs: {self.logs_dir}") from None

    def install_crds(self, *names: str, timeout: float = 60) -> None:
        """Apply CRDs from ``crds/`` (e.g. ``"pytorchjob"``, ``"jobset"``; all when none given) and
        wait until they are Established, so custom resources can be created right after."""
        files = [CRDS_DIR / f"{n}.yaml" for n in names] if names else sorted(CRDS_DIR.glob("*.yaml"))
        for f in files:
            self.kubectl("apply", "-f", str(f))
        for f in files:
            self.kubectl(
                "wait",
                "--for=condition=Established",
                f"--timeout={int(timeout)}s",
                "-f",
                str(f),
                timeout=timeout + 10,
            )
