"""What the benchmarks share: the machine description, tables, results files, certificates, configs,
and a ``gpuguard serve`` process pinned to one core.

Why one module: every benchmark must describe the machine the same way and write results the
same way, or numbers from different runs cannot be compared.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# ``GPUGUARD_BENCH_RESULTS`` sends results elsewhere: the smoke runs (``bench/smoke.py``) leave the
# recorded runs in bench/results alone.
RESULTS_DIR = Path(os.environ.get("GPUGUARD_BENCH_RESULTS") or HERE / "results")
BUILD_DIR = HERE / ".build"
FIXEDRATE = BUILD_DIR / "fixedrate"
WRK_SCRIPT = HERE / "loadgen" / "post.lua"
DEFAULT_CONFIG = ROOT / "policies" / "default-config.yaml"
SETUP = HERE / "setup.sh"  # builds FIXEDRATE from FIXEDRATE_SOURCE (and installs wrk, valgrind)
FIXEDRATE_SOURCE = HERE / "loadgen" / "fixedrate.c"
ALLOW_APP = HERE / "allow_app.py"  # the allow-all FastAPI app: the webhook stack's floor
SERVE_LAUNCHER = HERE / "_serve.py"  # gpuguard serve with the benchmark-only switches
# What --check-paths checks (bench/_paths.py): read or run (must exist), created here, run with -m.
NEEDS = (HERE, ROOT, DEFAULT_CONFIG, WRK_SCRIPT, SETUP, FIXEDRATE_SOURCE, ALLOW_APP, SERVE_LAUNCHER)
MADE = (RESULTS_DIR, BUILD_DIR, FIXEDRATE)
NEEDS_MODULES = ("gpuguard.webhook.__main__",)  # gpuguard_cli, gpuguard_server: python -m gpuguard.webhook

if str(ROOT) not in sys.path:  # `python bench/x.py` puts bench/ first on sys.path, not the repo
    sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- machine and results


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "-"


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, memory, kernel, and the Python stack's versions."""
    versions = {d: _version(d) for d in ("fastapi", "starlette", "uvicorn", "h11", "httptools", "uvloop",
                                         "pydantic", "orjson", "kubernetes")}
    return {
        "cpu": _cpu_model(), "cores": os.cpu_count(), "memory_gib": _mem_gib(), "kernel": platform.release(),
        "os": _os_release(), "python": platform.python_version(), "packages": versions,
    }


def _os_release() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    return platform.system()


def machine_line(info: dict[str, Any]) -> str:
    """One line naming the machine, for table headers."""
    return (f"{info['cpu']}, {info['cores']} cores, {info['memory_gib']} GiB, {info['os']}, kernel {info['kernel']}, "
            f"Python {info['python']}")


def code_version() -> dict[str, Any]:
    """The commit measured, and whether webhook/ or policies/ had uncommitted changes (numbers move with them)."""
    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=20)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "engine_dirty": bool(git("status", "--porcelain", "--", "webhook", "policies"))}


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """``bench/results/NAME.json``: the last run, with when and where it ran."""
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    doc = {"benchmark": name, "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "machine": machine(), "code": code_version(), **payload}
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (pastes into bench/README.md as it is, and reads fine in a terminal)."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# ---------------------------------------------------------------- certificates and configs


def gpuguard_cli(*args: str, timeout: float = 60) -> str:
    """Run ``gpuguard ARGS`` (as ``python -m gpuguard.webhook.main``, so the checkout is used); its stdout."""
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"gpuguard {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def make_certs(out: Path) -> Path:
    """CA and serving cert for 127.0.0.1, with the admins' command (``gpuguard certs create``)."""
    if not (out / "tls.crt").exists():
        gpuguard_cli("certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", str(out),
                     "--ip", "127.0.0.1")
    return out


def all_off_config_text() -> str:
    """The shipped default config with every policy ``action: off`` and no profiles.

    The allow-all baseline: the same server, TLS, envelope parsing, object copy, workload view,
    patch diff and logging as gpuguard, minus the policy work -- the framework's ceiling.
    """
    from gpuguard.policies import REGISTRY

    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    doc["policies"] = {pid: {"action": "off"} for pid in REGISTRY}
    doc["profiles"] = []
    return yaml.safe_dump(doc, sort_keys=False)


# ---------------------------------------------------------------- processes


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the kernel picks it; the small race is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM (peak resident set) of a live process, in MB; ``None`` once it is gone."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def rss_mb(pid: int) -> float | None:
    """VmRSS (resident set now) of a live process, in MiB; ``None`` once it is gone."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def pinned(argv: list[str], cpu: int | None) -> list[str]:
    """``argv`` under ``taskset -c CPU`` when pinning is asked for and possible."""
    if cpu is None or shutil.which("taskset") is None or (os.cpu_count() or 1) <= cpu:
        return argv
    return ["taskset", "-c", str(cpu), *argv]


class Server:
    """One uvicorn process serving HTTPS on 127.0.0.1 (gpuguard or the bare baseline), pinned to a core.

    Started in its own session and stopped by its own pid only (SIGTERM, then SIGKILL).
    """

    def __init__(self, name: str, argv: list[str], port: int, ca: Path, log: Path, cpu: int | None) -> None:
        self.name, self.argv, self.port, self.ca, self.log, self.cpu = name, argv, port, ca, log, cpu
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(pinned(self.argv, self.cpu), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env={**os.environ, **self.env})
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.log.read_text(errors='replace')[-3000:]}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f} s; log: {self.log}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def gpuguard_server(workdir: Path, certs: Path, config_text: str | None, *, cpu: int | None,
                    log_level: str = "info", python: str | None = None, name: str = "gpuguard",
                    launcher: Sequence[str] = ("-m", "gpuguard.webhook")) -> Server:
    """``gpuguard serve`` exactly as the docs run it (one worker), with ``config_text`` or the default config."""
    port = free_port()
    argv = [python or sys.executable, *launcher, "serve", "--tls-cert", str(certs / "tls.crt"),
            "--tls-key", str(certs / "tls.key"), "--host", "127.0.0.1", "--port", str(port),
            "--log-level", log_level]
    if config_text is not None:
        config = workdir / f"{name}.config.yaml"
        config.write_text(config_text)
        argv += ["--config", str(config)]
    return Server(name, argv, port, certs / "ca.crt", workdir / f"{name}.log", cpu)


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    """Start ``server`` and stop it on the way out, whatever happens in between."""
    server.start()
    try:
        yield server
    finally:
        server.stop()


def check_loopback(url: str) -> None:
    """Every load run targets 127.0.0.1 only; refuse anything else before a single request goes out."""
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname or ""
    if not (host == "localhost" or host.startswith("127.")):
        raise SystemExit(f"refusing to load-test {url}: benchmarks target 127.0.0.1 only")


# ---------------------------------------------------------------- profiles


def _module_of(filename: str, funcname: str) -> str:
    """A readable owner for one profiled function: repo module, site-package, stdlib module or C builtin."""
    if filename == "~" or filename.startswith("<"):
        # C functions: "<built-in method orjson.loads>", "<method 'read' of '_ssl._SSLSocket' objects>"
        text = funcname.strip("<>")
        if " of '" in text:
            owner = text.split(" of '", 1)[1].split("'", 1)[0]
            return f"C:{owner.split('.')[0].lstrip('_')}"
        name = text.replace("built-in method ", "").replace("built-in function ", "")
        return f"C:{name.split('.')[0]}" if "." in name else f"C:builtins.{name}"
    path = Path(filename)
    with contextlib.suppress(ValueError):
        rel = path.resolve().relative_to(ROOT)
        parts = list(rel.with_suffix("").parts)
        return ".".join(parts[:2]) if parts[0] in ("webhook", "policies", "certs") else ".".join(parts)
    parts = path.parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    return f"stdlib:{path.stem if path.parent.name.startswith('python3') else path.parent.name}"


def profile_by_module(stats_path: Path | str, top: int = 20) -> list[tuple[str, float, float]]:
    """cProfile self time summed per module: ``[(module, seconds, share)]``, largest first."""
    import pstats

    stats = pstats.Stats(str(stats_path))
    totals: dict[str, float] = {}
    for (filename, _line, funcname), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        key = _module_of(filename, funcname)
        totals[key] = totals.get(key, 0.0) + tottime
    grand = sum(totals.values()) or 1.0
    ranked = sorted(totals.items(), key=lambda kv: kv[1], reverse=True)
    return [(name, secs, secs / grand) for name, secs in ranked[:top]]


def cpu_busy_elsewhere(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over ``seconds`` (sampled from /proc/stat) before a run starts.

    Why: on a 2-core machine a compiler or test suite running next to the benchmark halves
    the numbers; the tables say so instead of silently reporting them.
    """
    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return idle, sum(fields)

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return 0.0
    total = total1 - total0
    return 0.0 if total <= 0 else round(1 - (idle1 - idle0) / total, 3)


def quiet_warning(busy: float) -> str | None:
    """The warning printed under a table when other work kept the CPUs busy before the run."""
    if busy > 0.10:
        return (f"WARNING: {busy:.0%} of the CPUs were busy with other work before the run; "
                "these numbers are not comparable (re-run on an idle machine)")
    return None


def wait_quiet(max_wait: float, threshold: float = 0.15) -> float:
    """Wait (up to ``max_wait`` s) until other work leaves the CPUs mostly idle; the last busy share seen.

    The machine may be shared with builds or test suites that come and go; waiting a little for
    a quiet window costs less than a point measured against a compiler.
    """
    deadline = time.monotonic() + max_wait
    busy = cpu_busy_elsewhere(0.5)
    while busy > threshold and time.monotonic() < deadline:
        busy = cpu_busy_elsewhere(1.0)
    return busy


def _busy_ticks() -> int:
    # user nice system idle iowait irq softirq steal: all but idle and iowait. Steal counts: it is
    # time the hypervisor gave our vCPUs to someone else, which slows a point just the same.
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return sum(fields) - fields[3] - fields[4]


def _proc_ticks(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    return 0


class CpuAccount:
    """CPU used by *other* processes while a load point ran, in cores (0.0 = undisturbed).

    Busy time of the whole machine minus the server's, the load generator's (a waited-for
    child) and this script's own.  A point above ~0.1 core was measured next to someone else's
    work and is retried or flagged.
    """

    def __init__(self, pids: Sequence[int]) -> None:
        import resource

        self._resource = resource
        self.pids = list(pids)
        self.other_cores = 0.0

    def _snapshot(self) -> tuple[float, int, int, float]:
        r = self._resource
        ours = r.getrusage(r.RUSAGE_CHILDREN)
        me = r.getrusage(r.RUSAGE_SELF)
        return (time.monotonic(), _busy_ticks(), sum(_proc_ticks(p) for p in self.pids),
                ours.ru_utime + ours.ru_stime + me.ru_utime + me.ru_stime)

    def __enter__(self) -> CpuAccount:
        self._start = self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        end = self._snapshot()
        hz = os.sysconf("SC_CLK_TCK")
        wall = end[0] - self._start[0]
        busy = (end[1] - self._start[1]) / hz
        servers = (end[2] - self._start[2]) / hz
        children = end[3] - self._start[3]
        self.other_cores = round(max(0.0, busy - servers - children) / wall, 3) if wall > 0 else 0.0
