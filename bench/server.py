"""Server benchmark: ``gpuguard serve`` over TLS, one worker, under load from C load generators.

``python bench/server.py`` (after ``bash bench/setup.sh``).  Three servers run side by side, all
alive for the whole run and all pinned to the same core (CPU 0; the load generator on CPU 1):

* **gpuguard**: ``gpuguard serve`` as documented (the shipped config, ``--log-level info``);
* **allow-all**: the same server with every policy ``action: off`` (envelope, object copy,
  workload view, patch diff and logging still run: the framework's ceiling);
* **bare**: ``bench/allow_app.py``, a FastAPI app that reads the body, takes the uid and allows
  (the floor of the Python HTTP/TLS stack).

**Saturation** is measured in interleaved rounds: in every round, for every body and endpoint
(``/mutate``, ``/validate``: the validate body carries the already-mutated object, as the
apiserver sends it), one short closed-loop point with Debian's ``wrk`` against each server in
turn, the order of the three rotated from round to round.  Drift of the machine (other work,
thermal or steal time) then lands on all three alike: each table cell is the median over the
rounds, and a ratio is the median of the per-round ratios (gpuguard's point divided by the
baseline's point of the same round), never a ratio of medians taken minutes apart.

**Fixed rates** (100, 500, 1000 reviews/s by default) on ``/mutate`` of gpuguard with
``bench/loadgen/fixedrate`` (open loop, latency from each request's due time, so queueing is
counted), after the rounds.  **Memory** per worker: RSS right after start, before serving
anything; gpuguard's peak (VmHWM) after each body's first requests; every worker's VmHWM at the
end of the run.

Every load run is bounded (``--duration`` seconds per fixed-rate point, 30 at most) and targets
127.0.0.1 only.  Speed never fails this script: it prints tables and writes
``bench/results/server.json`` with the commit (``bench/report.py`` copies the tables into
``bench/README.md``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson
from _common import (
    ALLOW_APP,
    FIXEDRATE,
    SERVE_LAUNCHER,
    WRK_SCRIPT,
    CpuAccount,
    Server,
    all_off_config_text,
    check_loopback,
    code_version,
    free_port,
    gpuguard_server,
    machine,
    machine_line,
    make_certs,
    peak_rss_mb,
    pinned,
    profile_by_module,
    rss_mb,
    running,
    table,
    wait_quiet,
    write_results,
)
from _paths import add_option, check_paths

SERVER_CPU = 0
LOAD_CPU = 1
WRK_CONNECTIONS = 8
FIXED_CONNECTIONS = 16
MAX_POINT_SECONDS = 30
GC_TUNED = "freeze,10000,20,50"
DISTURBED_CORES = 0.10  # other processes' CPU during a point above this: retry once, then flag
VARIANTS = ("gpuguard", "allow-all", "bare")


def wrk(url: str, body: Path, seconds: float, connections: int = WRK_CONNECTIONS) -> dict[str, Any]:
    """One closed-loop saturation point with wrk; the JSON line its Lua ``done`` prints."""
    check_loopback(url)
    argv = pinned(["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "5s",
                   "-s", str(WRK_SCRIPT), url], LOAD_CPU)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=False,
                         env={**os.environ, "BODY": str(body)})
    match = re.search(r"^WRKJSON (.*)$", out.stdout, re.MULTILINE)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    data = orjson.loads(match.group(1))
    data["rps"] = data["requests"] / (data["duration_us"] / 1e6)
    data["errors"] = sum(data[k] for k in ("connect_errors", "read_errors", "write_errors", "status_errors",
                                             "timeouts"))
    return data


def fixed_rate(url: str, body: Path, rate: int, seconds: float, ca: Path) -> dict[str, Any]:
    """One open-loop point at ``rate`` requests/s (1 s of it is warm-up, not measured)."""
    check_loopback(url)
    argv = pinned([str(FIXEDRATE), "-u", url, "-b", str(body), "-r", str(rate), "-d", str(seconds),
                   "-c", str(FIXED_CONNECTIONS), "-w", "1", "-k", str(ca)], LOAD_CPU)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"fixedrate failed ({out.returncode}):\n{out.stderr}")
    return orjson.loads(out.stdout)


def bare_server(workdir: Path, certs: Path, python: str) -> Server:
    """The bare FastAPI allow-all app (bench/allow_app.py) on the same certificates and core."""
    port = free_port()
    argv = [python, str(ALLOW_APP), "--port", str(port), "--cert", str(certs / "tls.crt"),
            "--key", str(certs / "tls.key")]
    return Server("bare", argv, port, certs / "ca.crt", workdir / "bare.log", SERVER_CPU)


def preflight() -> None:
    """Stop early, with the fix, when setup.sh has not been run."""
    missing = [what for what, ok in (("wrk", shutil.which("wrk")), ("taskset", shutil.which("taskset")),
                                     (str(FIXEDRATE), FIXEDRATE.exists())) if not ok]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}: run `bash bench/setup.sh` first")
    if (os.cpu_count() or 1) < 2:
        print("warning: fewer than 2 CPUs; server and load generator share a core", file=sys.stderr)


def measured(run: Callable[[], dict[str, Any]], pids: list[int], quiet_wait: float) -> dict[str, Any]:
    """Run one load point, accounting for other processes' CPU (``pids``: the servers); a disturbed point is
    retried once if a quiet window comes within ``quiet_wait`` (on a machine busy throughout, it is kept, flagged)."""
    point: dict[str, Any] = {}
    for attempt in (1, 2):
        with CpuAccount(pids) as account:
            point = run()
        point["other_cpu_cores"] = account.other_cores
        point["attempts"] = attempt
        if account.other_cores <= DISTURBED_CORES or attempt == 2:
            break
        if wait_quiet(quiet_wait) > 0.15:
            break
        print(f"    disturbed ({account.other_cores:.2f} cores of other work); retrying in a quiet window",
              file=sys.stderr)
    return point


def make_servers(workdir: Path, certs: Path, args: argparse.Namespace) -> dict[str, Server]:
    """The variants to run (not started yet): gpuguard, and unless ``--no-baselines`` allow-all and bare."""
    if args.gc_tuned:
        guard = gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=args.python, name="gpuguard",
                                launcher=[str(SERVE_LAUNCHER)])
        guard.env = {"GPUGUARD_BENCH_GC": args.gc_tuned}
    else:
        guard = gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=args.python, name="gpuguard")
    servers = {"gpuguard": guard}
    if not args.no_baselines:
        servers["allow-all"] = gpuguard_server(workdir, certs, all_off_config_text(), cpu=SERVER_CPU,
                                               python=args.python, name="allow-all")
        servers["bare"] = bare_server(workdir, certs, args.python)
    return servers


def warm_up(servers: dict[str, Server], names: list[str], endpoints: list[str], seconds: float,
            watched: str | None = "gpuguard") -> dict[str, float | None]:
    """A short load on every server, body by body; gpuguard's peak RSS after each body (not recorded as speed).

    Why body by body: the peak grows with the largest body a worker has parsed, so the peaks read
    after each body say which body costs the memory.
    """
    from bodies import body_path

    peaks: dict[str, float | None] = {}
    for name in names:
        for server in servers.values():
            for endpoint in endpoints:
                wrk(f"{server.url}/{endpoint}", body_path(name, endpoint), seconds)
        if watched is not None:
            peaks[name] = peak_rss_mb(servers[watched].pid)
    return peaks


def rounds(servers: dict[str, Server], names: list[str], endpoints: list[str], count: int, seconds: float,
           quiet_wait: float) -> list[dict[str, Any]]:
    """Interleaved saturation points: ``count`` rounds of every body x endpoint x server, order rotated per round.

    A disturbed point is flagged, not retried: a retry would be measured later than the two
    points it is compared with, which is the drift the rounds are there to cancel.
    """
    from bodies import body_path

    variants = list(servers)
    pids = [s.pid for s in servers.values()]
    points = []
    for index in range(count):
        busy = wait_quiet(quiet_wait)
        order = variants[index % len(variants):] + variants[:index % len(variants)]
        for name in names:
            for endpoint in endpoints:
                body = body_path(name, endpoint)
                for variant in order:
                    url = f"{servers[variant].url}/{endpoint}"
                    with CpuAccount(pids) as account:
                        point = wrk(url, body, seconds)
                    point["other_cpu_cores"] = account.other_cores
                    point.update({"round": index + 1, "body": name, "endpoint": endpoint, "variant": variant,
                                  "cpu_busy_before_round": busy})
                    points.append(point)
                print(f"  round {index + 1}/{count} {name:15} {endpoint:8} "
                      + "  ".join(f"{p['variant']} {p['rps']:6.0f}/s" for p in points[-len(order):]),
                      file=sys.stderr)
    return points


def fixed_rates(server: Server, names: list[str], rates: list[int], seconds: float, pids: list[int],
                saturation: dict[str, float | None], quiet_wait: float) -> list[dict[str, Any]]:
    """Open-loop points on gpuguard's ``/mutate``, body by body."""
    from bodies import body_path

    out = []
    for name in names:
        for rate in rates:
            body = body_path(name, "mutate")
            point = measured(lambda r=rate, b=body: fixed_rate(f"{server.url}/mutate", b, r, seconds, server.ca),
                             pids, quiet_wait)
            point.update({"body": name, "saturation_rps": saturation.get(name)})
            out.append(point)
            print(f"  gpuguard {name:15} mutate {rate:5}/s  achieved {point['achieved_rps']:7.0f}/s  "
                  f"p50 {point['p50_ms']:.2f} p99 {point['p99_ms']:.2f} ms", file=sys.stderr)
    return out


def summarise(points: list[dict[str, Any]], names: list[str], endpoints: list[str]) -> list[dict[str, Any]]:
    """Per body and endpoint: each variant's medians over the rounds, and the medians of the per-round ratios."""
    out = []
    for name in names:
        for endpoint in endpoints:
            mine = [p for p in points if p["body"] == name and p["endpoint"] == endpoint]
            by_round: dict[int, dict[str, dict[str, Any]]] = {}
            for p in mine:
                by_round.setdefault(p["round"], {})[p["variant"]] = p
            row: dict[str, Any] = {"body": name, "endpoint": endpoint, "rounds": len(by_round),
                                   "other_cpu_cores": max((p["other_cpu_cores"] for p in mine), default=0.0),
                                   "errors": sum(p["errors"] for p in mine)}  # any variant's: none expected
            for variant in VARIANTS:
                own = [p for p in mine if p["variant"] == variant]
                if own:
                    row[variant] = {key: statistics.median(p[key] for p in own)
                                    for key in ("rps", "p50_ms", "p90_ms", "p99_ms")}
                    row[variant]["rps_per_round"] = [round(p["rps"], 1) for p in own]
            for base in ("allow-all", "bare"):
                ratios = [r["gpuguard"]["rps"] / r[base]["rps"] for r in by_round.values()
                          if "gpuguard" in r and base in r and r[base]["rps"] > 0]
                if ratios:
                    row[f"ratio_{base}"] = {"median": statistics.median(ratios), "min": min(ratios),
                                            "max": max(ratios), "per_round": [round(x, 3) for x in ratios]}
            out.append(row)
    return out


BREAKDOWN = (  # variant, launcher environment, log level, config: each step removes one cost of the one before
    ("gpuguard", {}, "info", None),
    ("engine on the event loop", {"GPUGUARD_BENCH_INLINE": "1"}, "info", None),
    ("... and no review log line", {"GPUGUARD_BENCH_INLINE": "1"}, "warning", None),
    ("... and every policy off", {"GPUGUARD_BENCH_INLINE": "1"}, "warning", "off"),
    ("bare FastAPI app", None, "", None),  # the last step: envelope, object copy, view, diff, metrics, routing
)


def breakdown(workdir: Path, certs: Path, python: str, count: int, seconds: float,
              quiet_wait: float) -> list[dict[str, Any]]:
    """Where gpuguard's distance to the bare stack goes (GPU Job, /mutate): interleaved rounds over servers
    that each drop one more cost -- the engine's thread hand-over, the JSON log line, the policies."""
    servers: dict[str, Server] = {}
    for index, (label, env, level, config) in enumerate(BREAKDOWN):
        if env is None:
            servers[label] = bare_server(workdir, certs, python)
            continue
        server = gpuguard_server(workdir, certs, all_off_config_text() if config == "off" else None, cpu=SERVER_CPU,
                                 python=python, name=f"breakdown-{index}", log_level=level,
                                 launcher=[str(SERVE_LAUNCHER)])
        server.env = env
        servers[label] = server
    with ExitStack() as stack:
        for server in servers.values():
            stack.enter_context(running(server))
        warm_up(servers, ["gpu-job-pvc"], ["mutate"], 1, None)
        points = rounds(servers, ["gpu-job-pvc"], ["mutate"], count, seconds, quiet_wait)
    bare = {p["round"]: p["rps"] for p in points if p["variant"] == "bare FastAPI app"}
    out = []
    for label, *_ in BREAKDOWN:
        own = [p for p in points if p["variant"] == label]
        rps = statistics.median(p["rps"] for p in own)
        out.append({"variant": label, "rps": rps, "us_per_review": 1e6 / rps,
                    "ratio_bare": statistics.median(p["rps"] / bare[p["round"]] for p in own),
                    "rps_per_round": [round(p["rps"], 1) for p in own],
                    "other_cpu_cores": max(p["other_cpu_cores"] for p in own)})
    return out


def profile_server(workdir: Path, certs: Path, python: str, name: str,
                   seconds: float) -> list[tuple[str, float, float]]:
    """Profile gpuguard (cProfile, only while wrk saturates it with one body, the engine on the event loop); self
    time grouped by module."""
    from bodies import body_path

    out = workdir / "server.prof"
    server = gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=python, name="profiled",
                             launcher=[str(SERVE_LAUNCHER)])
    # cProfile sees the thread it was enabled on (the event loop's): the engine runs there too for the profile.
    server.env = {"GPUGUARD_BENCH_PROFILE": str(out), "GPUGUARD_BENCH_INLINE": "1"}
    with running(server):
        wrk(f"{server.url}/mutate", body_path(name, "mutate"), 2)  # warm-up, not profiled
        os.kill(server.pid, signal.SIGUSR1)
        wrk(f"{server.url}/mutate", body_path(name, "mutate"), seconds)
        os.kill(server.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # dump_stats may still be writing
    return profile_by_module(out, top=1000)


# Module names as ``_common.profile_by_module`` gives them: "webhook.server", "workloads.view", "policies.job_ttl".
_LAYERS = (
    ("HTTP, TLS and event loop (uvicorn, httptools, asyncio, ssl, socket)",
     ("uvicorn", "h11", "httptools", "uvloop", "stdlib:asyncio", "C:ssl", "C:socket", "C:select", "stdlib:ssl",
      "stdlib:selectors", "C:_asyncio", "C:asyncio", "stdlib:socket", "anyio", "sniffio")),
    ("FastAPI and Starlette (routing, request, response, telemetry)", ("fastapi", "starlette", "opentelemetry")),
    ("gpuguard request glue (server, envelope, metrics, logging)",
     ("webhook.server", "pydantic", "C:pydantic_core",
      "prometheus_client", "stdlib:logging", "stdlib:threading", "stdlib:time", "C:time", "stdlib:json")),
    ("engine and policies (copy, view, policies, patch)",
     ("webhook.engine", "workloads.", "webhook.config", "webhook.custom", "webhook.decision", "webhook.objects",
      "policies.", "C:orjson", "stdlib:fnmatch", "stdlib:decimal", "C:decimal")),
)


def layers(profile: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """The module profile folded into four layers; builtins and the rest are spread in "other"."""
    totals = {name: 0.0 for name, _ in _LAYERS}
    other = 0.0
    for module, _secs, share in profile:
        for name, prefixes in _LAYERS:
            if any(module == p or (p.endswith(".") and module.startswith(p)) for p in prefixes):
                totals[name] += share
                break
        else:
            other += share
    return [*totals.items(), ("other (C builtins, dict/str/list methods, typing, re ...)", other)]


def main(argv: list[str] | None = None) -> int:
    """Start the three servers, run the interleaved rounds, the fixed rates and the profile; write server.json."""
    parser = argparse.ArgumentParser(description="gpuguard server throughput and latency over TLS")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved saturation rounds (default: %(default)s)")
    parser.add_argument("--point", type=float, default=3, metavar="SECONDS",
                        help="seconds per saturation point in a round (default: %(default)s)")
    parser.add_argument("--duration", type=float, default=10,
                        help="seconds per fixed-rate point (default: 10, max 30)")
    parser.add_argument("--rates", default="100,500,1000", help="fixed rates for /mutate (default: %(default)s)")
    parser.add_argument("--bodies", default="all", help="comma-separated body names (default: all)")
    parser.add_argument("--endpoints", default="mutate,validate", help="saturation endpoints (default: %(default)s)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the allow-all and bare baselines")
    parser.add_argument("--profile", action="store_true",
                        help="also profile gpuguard at saturation on gpu-job-pvc (cProfile, grouped by module)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also split gpuguard's distance to the bare stack (GPU Job /mutate, 5 interleaved "
                             "rounds): engine thread hand-over, review log line, policies, the rest")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the servers (e.g. a venv with uvloop/httptools to compare)")
    parser.add_argument("--quiet-wait", type=float, default=120, metavar="SECONDS",
                        help="wait up to this long for other work to leave the CPUs idle before each round "
                             "(default: %(default)s)")
    parser.add_argument("--gc-tuned", nargs="?", const=GC_TUNED, metavar="freeze,G0,G1,G2",
                        help=f"run gpuguard with gc.freeze() after start-up and these gc thresholds (default "
                             f"{GC_TUNED}): the proposed fix for full-collection stalls, measured from bench/")
    parser.add_argument("--quick", action="store_true",
                        help="2 rounds of 2 s points and 3 s fixed-rate points, GPU Job body only: a smoke run "
                             "(results in server-quick.json unless --tag says otherwise)")
    parser.add_argument("--tag", default="", help="suffix for the results file (server-TAG.json)")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    if args.quick and not args.tag:
        args.tag = "quick"  # the recorded full run (server.json, the README's table) stays as it is
    from bodies import NAMES, ensure_bodies

    preflight()
    ensure_bodies()
    count = 2 if args.quick else max(1, args.rounds)
    point = 2.0 if args.quick else min(float(args.point), MAX_POINT_SECONDS)
    seconds = 3.0 if args.quick else min(float(args.duration), MAX_POINT_SECONDS)
    names = ["gpu-job-pvc"] if args.quick else (list(NAMES) if args.bodies == "all" else args.bodies.split(","))
    endpoints = args.endpoints.split(",")
    rates = [int(r) for r in args.rates.split(",") if r]
    wait = args.quiet_wait

    info = machine()
    code = code_version()  # the servers load the code now: a commit made during the run is not what was measured
    packages = server_packages(args.python)
    print(f"machine: {machine_line(info)}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        servers = make_servers(workdir, certs, args)
        memory: dict[str, dict[str, Any]] = {}
        for variant, server in servers.items():
            stack.enter_context(running(server))
            time.sleep(0.5)  # let start-up settle before reading its RSS
            memory[variant] = {"rss_after_start_mb": rss_mb(server.pid), "peak_after_start_mb": peak_rss_mb(server.pid)}
        pids = [s.pid for s in servers.values()]
        memory["gpuguard"]["peak_after_body_mb"] = warm_up(servers, names, endpoints, 1)
        points = rounds(servers, names, endpoints, count, point, wait)
        summary = summarise(points, names, endpoints)
        saturation = {r["body"]: r["gpuguard"]["rps"] for r in summary if r["endpoint"] == "mutate"}
        wait_quiet(wait)
        rate_points = fixed_rates(servers["gpuguard"], names, rates, seconds, pids, saturation, min(wait, 10))
        for variant, server in servers.items():
            memory[variant]["peak_end_mb"] = peak_rss_mb(server.pid)
            memory[variant]["rss_end_mb"] = rss_mb(server.pid)
        split = None
        if args.breakdown:
            wait_quiet(wait)
            split = breakdown(workdir, certs, args.python, 2 if args.quick else 5, point, wait)
        profile = None
        if args.profile:
            wait_quiet(wait)
            profile = profile_server(workdir, certs, args.python, "gpu-job-pvc", seconds)

    stack_line = ", ".join(f"{k} {v}" for k, v in packages.items())
    gc_note = f"; gc tuned ({args.gc_tuned}) in gpuguard" if args.gc_tuned else ""
    header = (f"machine: {machine_line(info)}\nservers: {', '.join(servers)}, one worker each, all alive for the run, "
              f"all pinned to CPU {SERVER_CPU}{gc_note}, --log-level info (one JSON line per review, to a file); "
              f"load generator pinned to CPU {LOAD_CPU}\nsaturation: {count} interleaved rounds of {point:.0f} s "
              f"points; fixed rates: {seconds:.0f} s points\nstack: {stack_line}\n")
    tables = header + "\n" + render(summary, rate_points, memory, names, count, split, profile)
    print("\n" + tables)
    path = write_results(f"server{'-' + args.tag if args.tag else ''}", {
        "code": code,
        "settings": {"rounds": count, "seconds_per_saturation_point": point, "seconds_per_rate_point": seconds,
                     "rates": rates, "endpoints": endpoints, "bodies": names, "variants": list(servers),
                     "wrk_connections": WRK_CONNECTIONS, "fixedrate_connections": FIXED_CONNECTIONS,
                     "server_cpu": SERVER_CPU, "load_cpu": LOAD_CPU, "python": args.python,
                     "server_python_packages": packages, "gc_tuned": args.gc_tuned},
        "summary": summary, "points": points, "rates": rate_points, "memory": memory, "breakdown": split,
        "profile": profile,
        "tables": tables,
    })
    print(f"\nresults: {path}")
    return 0


def server_packages(python: str) -> dict[str, str]:
    """Versions of the HTTP stack in the interpreter that runs the servers (may differ from this one)."""
    code = ("import importlib.metadata as m, json\nout = {}\n"
            "for d in ('uvicorn', 'h11', 'httptools', 'uvloop', 'starlette', 'fastapi'):\n"
            "    try: out[d] = m.version(d)\n    except m.PackageNotFoundError: out[d] = 'not installed'\n"
            "print(json.dumps(out))")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False, timeout=30)
    return orjson.loads(proc.stdout) if proc.returncode == 0 else {}


def _other(points: list[dict[str, Any]]) -> str:
    worst = max((p.get("other_cpu_cores", 0.0) for p in points), default=0.0)
    return f"{worst:.2f}" + (" DISTURBED" if worst > DISTURBED_CORES else "")


def _ratio(row: dict[str, Any], base: str) -> str | None:
    r = row.get(f"ratio_{base}")
    if r is None:
        return None
    spread = f" ({r['min']:.2f}-{r['max']:.2f})" if r["min"] != r["max"] else ""
    return f"{r['median']:.2f}{spread}"


def render(summary: list[dict[str, Any]], rate_points: list[dict[str, Any]], memory: dict[str, dict[str, Any]],
           names: list[str], count: int, split: list[dict[str, Any]] | None,
           profile: list[tuple[str, float, float]] | None) -> str:
    """The tables: interleaved saturation with the ratios, memory, fixed rates, and the profile."""
    out = []
    rows = []
    for row in summary:
        g, a, b = row.get("gpuguard", {}), row.get("allow-all"), row.get("bare")
        rows.append([row["body"], f"/{row['endpoint']}", g.get("rps"), g.get("p50_ms"), g.get("p99_ms"),
                     row["errors"], a["rps"] if a else None, b["rps"] if b else None, _ratio(row, "allow-all"),
                     _ratio(row, "bare"), _other([{"other_cpu_cores": row["other_cpu_cores"]}])])
    out.append(f"Saturation (wrk, {WRK_CONNECTIONS} connections, closed loop), {count} interleaved rounds: medians "
               "over the rounds; ratios are medians of the per-round ratios (min-max in brackets)")
    out.append(table(["body", "endpoint", "gpuguard req/s", "p50 ms", "p99 ms", "errors", "allow-all req/s",
                      "bare req/s", "gpuguard / allow-all", "gpuguard / bare", "other CPU"], rows))
    all_bare = [r["ratio_bare"]["median"] for r in summary if "ratio_bare" in r]
    if all_bare:
        out.append(f"gpuguard / bare over every body and endpoint: median {statistics.median(all_bare):.2f}, "
                   f"lowest {min(all_bare):.2f}, highest {max(all_bare):.2f}")

    out.append("\nMemory per worker (MiB): RSS right after start, before any request; peak (VmHWM) at the end of "
               "the run")
    out.append(table(["worker", "RSS after start", "peak RSS at end"],
                     [[v, m.get("rss_after_start_mb"), m.get("peak_end_mb")] for v, m in memory.items()]))
    after = memory.get("gpuguard", {}).get("peak_after_body_mb") or {}
    if after:
        out.append("gpuguard's peak RSS after the first requests of each body, in this order (MiB): "
                   + ", ".join(f"{n} {after[n]}" for n in names if n in after))

    if rate_points:
        rows = []
        for p in rate_points:
            sat = p.get("saturation_rps")
            over = p["unfinished"] > 0 or p["achieved_rps"] < 0.95 * p["target_rps"] or (
                sat is not None and p["target_rps"] > 0.95 * sat)
            note = "over capacity" if over else ("queued (p50 over 50 ms)" if p["p50_ms"] > 50 else "")
            rows.append([p["body"], int(p["target_rps"]), p["achieved_rps"], p["p50_ms"], p["p90_ms"], p["p99_ms"],
                         p["max_ms"], p["errors"] + p["non_200"], _other([p]), note])
        out.append(f"\nFixed rate on gpuguard's /mutate (bench/loadgen/fixedrate: open loop, {FIXED_CONNECTIONS} "
                   "connections, latency from each request's due time, 1 s warm-up not counted)")
        out.append(table(["body", "target/s", "achieved/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors",
                          "other CPU", "note"], rows))
    if split:
        rows = []
        for before, row in zip([None, *split], split, strict=False):
            step = before["us_per_review"] - row["us_per_review"] if before else None
            rows.append([row["variant"], row["rps"], row["us_per_review"], step, f"{row['ratio_bare']:.2f}",
                         _other([row])])
        out.append("\nWhere the distance to the bare stack goes (gpu-job-pvc, /mutate; interleaved rounds, one server "
                   "per row, each dropping one more cost than the row above)")
        out.append(table(["server", "req/s", "us per review", "us saved by this step", "ratio to bare",
                          "other CPU"], rows))
    if profile:
        out.append("\nWhere a saturated gpuguard worker spends its CPU (gpu-job-pvc, /mutate, under wrk; cProfile "
                   "self time, profiler overhead included; the engine on the event loop so that one thread holds "
                   "it all): by layer, then the top modules")
        out.append(table(["layer", "share"], [[name, f"{share:.1%}"] for name, share in layers(profile)]))
        out.append("")
        out.append(table(["module", "share"], [[m, f"{share:.1%}"] for m, _s, share in profile[:16]]))
    out.append("\nother CPU: cores used by processes other than the servers and the load generator during a point "
               f"(worst of the row's points); above {DISTURBED_CORES} a point is flagged DISTURBED (a fixed-rate point "
               "is retried once first; a saturation point never, see the rounds).")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
