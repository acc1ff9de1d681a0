"""Server benchmark: ``gpuguard serve`` over TLS, one worker, under load from C load generators.

``python bench/server.py`` (after ``bash bench/setup.sh``).  For every body in ``bench/bodies``:

* **saturation** with Debian's ``wrk`` (closed loop, 8 keep-alive connections) on ``/mutate``
  and on ``/validate`` (the validate body carries the already-mutated object, as the apiserver
  sends it): requests/s and p50/p90/p99;
* **fixed rates** (100, 500, 1000 reviews/s by default) on ``/mutate`` with ``bench/loadgen/fixedrate``
  (open loop, latency from each request's due time, so queueing is counted);
* **peak RSS** of the worker (VmHWM) after that body's runs; a fresh server per body.

Side by side, on the same stack and in the same run: the **allow-all** baseline (gpuguard with
every policy ``action: off``: envelope, object copy, workload view, patch diff and logging still
run, so this is the framework's ceiling) and the **bare** FastAPI app (``bench/allow_app.py``:
read, take the uid, answer) as the floor of the HTTP/TLS stack.

The server is pinned to CPU 0 and the load generator to CPU 1 (``taskset``).  Every load run is
bounded (``--duration`` seconds per point, 30 at most) and targets 127.0.0.1 only.  Speed never
fails this script: it prints tables and writes ``bench/results/server.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from _common import (
    FIXEDRATE,
    HERE,
    WRK_SCRIPT,
    CpuAccount,
    Server,
    all_off_config_text,
    check_loopback,
    free_port,
    gpuguard_server,
    machine,
    machine_line,
    make_certs,
    peak_rss_mb,
    pinned,
    profile_by_module,
    running,
    table,
    wait_quiet,
    write_results,
)

SERVER_CPU = 0
LOAD_CPU = 1
WRK_CONNECTIONS = 8
FIXED_CONNECTIONS = 16
MAX_POINT_SECONDS = 30
GC_TUNED = "freeze,10000,20,50"
DISTURBED_CORES = 0.10  # other processes' CPU during a point above this: retry once, then flag


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
    argv = [python, str(HERE / "allow_app.py"), "--port", str(port), "--cert", str(certs / "tls.crt"),
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


def measured(run: Callable[[], dict[str, Any]], pid: int, quiet_wait: float) -> dict[str, Any]:
    """Run one load point, accounting for other processes' CPU; a disturbed point is retried once."""
    point: dict[str, Any] = {}
    for attempt in (1, 2):
        with CpuAccount([pid]) as account:
            point = run()
        point["other_cpu_cores"] = account.other_cores
        point["attempts"] = attempt
        if account.other_cores <= DISTURBED_CORES or attempt == 2:
            break
        print(f"    disturbed ({account.other_cores:.2f} cores of other work); waiting for quiet and retrying",
              file=sys.stderr)
        wait_quiet(quiet_wait)
    return point


def bench_variant(variant: str, make: Callable[[str], Server], names: list[str], endpoints: list[str],
                  rates: list[int], seconds: float, warmup: float, quiet_wait: float) -> list[dict[str, Any]]:
    """Every body against one server variant; a fresh process per body so peak RSS is per body."""
    from bodies import body_path

    rows = []
    for name in names:
        busy = wait_quiet(quiet_wait)
        server = make(name)
        with running(server):
            record: dict[str, Any] = {"variant": variant, "body": name,
                                      "size": body_path(name, "mutate").stat().st_size,
                                      "cpu_busy_before": busy, "saturation": {}, "rates": []}
            wrk(f"{server.url}/mutate", body_path(name, "mutate"), warmup)  # warm-up, not recorded
            for endpoint in endpoints:
                point = measured(lambda e=endpoint, u=server.url, n=name: wrk(f"{u}/{e}", body_path(n, e), seconds),
                                 server.pid, quiet_wait)
                record["saturation"][endpoint] = point
                print(f"  {variant:9} {name:15} {endpoint:8} saturation {point['rps']:8.0f}/s  "
                      f"p50 {point['p50_ms']:.2f} p99 {point['p99_ms']:.2f} ms", file=sys.stderr)
            saturated = record["saturation"].get("mutate", {}).get("rps")
            for rate in rates:
                body = body_path(name, "mutate")
                point = measured(
                    lambda r=rate, srv=server, b=body: fixed_rate(f"{srv.url}/mutate", b, r, seconds, srv.ca),
                    server.pid, quiet_wait)
                point["saturation_rps"] = saturated
                record["rates"].append(point)
                print(f"  {variant:9} {name:15} mutate   {rate:5}/s      achieved {point['achieved_rps']:7.0f}/s  "
                      f"p50 {point['p50_ms']:.2f} p99 {point['p99_ms']:.2f} ms", file=sys.stderr)
            record["peak_rss_mb"] = peak_rss_mb(server.pid)
        rows.append(record)
    return rows


def profile_server(workdir: Path, certs: Path, python: str, name: str,
                   seconds: float) -> list[tuple[str, float, float]]:
    """Profile gpuguard (cProfile, only while wrk saturates it with one body); self time grouped by module."""
    from bodies import body_path

    out = workdir / "server.prof"
    server = gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=python, name="profiled",
                             launcher=[str(HERE / "_serve.py")])
    server.env = {"GPUGUARD_BENCH_PROFILE": str(out)}
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


_LAYERS = (
    ("HTTP, TLS and event loop (uvicorn, h11, asyncio, ssl, socket)",
     ("uvicorn", "h11", "httptools", "uvloop", "stdlib:asyncio", "C:ssl", "C:socket", "C:select", "stdlib:ssl",
      "stdlib:selectors", "C:_asyncio", "C:asyncio", "stdlib:socket", "anyio", "sniffio")),
    ("FastAPI and Starlette (routing, request, response)", ("fastapi", "starlette")),
    ("gpuguard request glue (server, envelope, metrics, logging)",
     ("gpuguard.webhook.server.", "pydantic", "C:pydantic_core",
      "prometheus_client", "stdlib:logging", "stdlib:threading", "stdlib:time", "C:time", "stdlib:json")),
    ("engine and policies (copy, view, policies, patch)",
     ("gpuguard.webhook.engine.", "gpuguard.workloads.", "gpuguard.webhook.config",
      "gpuguard.webhook.decision", "gpuguard.policies.", "C:orjson", "stdlib:fnmatch", "stdlib:decimal", "C:decimal")),
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
    """Run every variant and body, optionally the profile, print the tables and write server.json."""
    parser = argparse.ArgumentParser(description="gpuguard server throughput and latency over TLS")
    parser.add_argument("--duration", type=float, default=10, help="seconds per load point (default: 10, max 30)")
    parser.add_argument("--rates", default="100,500,1000", help="fixed rates for /mutate (default: %(default)s)")
    parser.add_argument("--bodies", default="all", help="comma-separated body names (default: all)")
    parser.add_argument("--endpoints", default="mutate,validate", help="saturation endpoints (default: %(default)s)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the allow-all and bare baselines")
    parser.add_argument("--profile", action="store_true",
                        help="also profile gpuguard at saturation on gpu-job-pvc (cProfile, grouped by module)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter that runs the servers (e.g. a venv with uvloop/httptools to compare)")
    parser.add_argument("--quiet-wait", type=float, default=120, metavar="SECONDS",
                        help="wait up to this long for other work to leave the CPUs idle before each server "
                             "(default: %(default)s)")
    parser.add_argument("--gc-tuned", nargs="?", const=GC_TUNED, metavar="freeze,G0,G1,G2",
                        help=f"run gpuguard with gc.freeze() after start-up and these gc thresholds (default "
                             f"{GC_TUNED}): the proposed fix for full-collection stalls, measured from bench/")
    parser.add_argument("--quick", action="store_true", help="3 s per point, GPU Job body only: a smoke run")
    parser.add_argument("--tag", default="", help="suffix for the results file (server-TAG.json)")
    args = parser.parse_args(argv)
    from bodies import NAMES, ensure_bodies

    preflight()
    ensure_bodies()
    seconds = 3.0 if args.quick else min(float(args.duration), MAX_POINT_SECONDS)
    names = ["gpu-job-pvc"] if args.quick else (list(NAMES) if args.bodies == "all" else args.bodies.split(","))
    endpoints = args.endpoints.split(",")
    rates = [int(r) for r in args.rates.split(",") if r]
    warmup, wait = 2.0, args.quiet_wait

    info = machine()
    packages = server_packages(args.python)
    print(f"machine: {machine_line(info)}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        off_config = all_off_config_text()
        results: list[dict[str, Any]] = []
        def gpuguard(n: str) -> Server:
            if not args.gc_tuned:
                return gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=args.python, name=f"gpuguard-{n}")
            server = gpuguard_server(workdir, certs, None, cpu=SERVER_CPU, python=args.python, name=f"gpuguard-{n}",
                                     launcher=[str(HERE / "_serve.py")])
            server.env = {"GPUGUARD_BENCH_GC": args.gc_tuned}
            return server

        results += bench_variant("gpuguard", gpuguard, names, endpoints, rates, seconds, warmup, wait)
        if not args.no_baselines:
            results += bench_variant(
                "allow-all", lambda n: gpuguard_server(workdir, certs, off_config, cpu=SERVER_CPU,
                                                       python=args.python, name=f"allow-all-{n}"),
                names, endpoints, [], seconds, warmup, wait)
            results += bench_variant("bare", lambda n: bare_server(workdir, certs, args.python), names, ["mutate"],
                                     [], seconds, warmup, wait)
        profile = None
        if args.profile:
            wait_quiet(wait)
            profile = profile_server(workdir, certs, args.python, "gpu-job-pvc", seconds)

    stack = ", ".join(f"{k} {v}" for k, v in packages.items())
    gc_note = f"; gc tuned ({args.gc_tuned}) in gpuguard" if args.gc_tuned else ""
    header = (f"machine: {machine_line(info)}\nserver: one worker pinned to CPU {SERVER_CPU}{gc_note}, "
              f"--log-level info (one JSON line per review, to a file); load generator pinned to CPU {LOAD_CPU}; "
              f"{seconds:.0f} s per point\nstack: {stack}\n")
    tables = header + "\n" + render(results, names, endpoints, rates, profile)
    print("\n" + tables)
    path = write_results(f"server{'-' + args.tag if args.tag else ''}", {
        "settings": {"seconds_per_point": seconds, "rates": rates, "endpoints": endpoints, "bodies": names,
                     "wrk_connections": WRK_CONNECTIONS, "fixedrate_connections": FIXED_CONNECTIONS,
                     "server_cpu": SERVER_CPU, "load_cpu": LOAD_CPU, "python": args.python,
                     "server_python_packages": packages, "gc_tuned": args.gc_tuned},
        "results": results, "profile": profile, "tables": tables,
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


def render(results: list[dict[str, Any]], names: list[str], endpoints: list[str], rates: list[int],
           profile: list[tuple[str, float, float]] | None) -> str:
    """The tables: saturation side by side with the baselines, fixed rates, and the profile."""
    by = {(r["variant"], r["body"]): r for r in results}
    out = []
    rows = []
    for name in names:
        g = by.get(("gpuguard", name))
        if g is None:
            continue
        for endpoint in endpoints:
            s = g["saturation"][endpoint]
            base_rec = by.get(("allow-all", name), {})
            base = base_rec.get("saturation", {}).get(endpoint)
            bare_rec = by.get(("bare", name), {})
            bare = bare_rec.get("saturation", {}).get(endpoint)
            points = [p for p in (s, base, bare) if p]
            rows.append([name, f"/{endpoint}", s["rps"], s["p50_ms"], s["p90_ms"], s["p99_ms"], s["errors"],
                         base["rps"] if base else None, f"{s['rps'] / base['rps']:.2f}" if base else None,
                         bare["rps"] if bare else None, g["peak_rss_mb"], _other(points)])
    out.append(f"Saturation (wrk, {WRK_CONNECTIONS} connections, closed loop): gpuguard, the allow-all config "
               "(every policy off) and the bare FastAPI app")
    out.append(table(["body", "endpoint", "req/s", "p50 ms", "p90 ms", "p99 ms", "errors", "allow-all req/s",
                      "ratio", "bare req/s", "peak RSS MB", "other CPU"], rows))
    if rates:
        rows = []
        for name in names:
            g = by.get(("gpuguard", name))
            if g is None:
                continue
            for p in g["rates"]:
                sat = p.get("saturation_rps")
                over = p["unfinished"] > 0 or p["achieved_rps"] < 0.95 * p["target_rps"] or (
                    sat is not None and p["target_rps"] > 0.95 * sat)
                rows.append([name, int(p["target_rps"]), p["achieved_rps"], p["p50_ms"], p["p90_ms"], p["p99_ms"],
                             p["max_ms"], p["errors"] + p["non_200"], _other([p]),
                             "over capacity" if over else ""])
        out.append(f"\nFixed rate on /mutate (bench/loadgen/fixedrate: open loop, {FIXED_CONNECTIONS} connections, "
                   "latency from each request's due time, 1 s warm-up not counted)")
        out.append(table(["body", "target/s", "achieved/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors",
                          "other CPU", "note"], rows))
    if profile:
        out.append("\nWhere a saturated gpuguard worker spends its CPU (gpu-job-pvc, /mutate, under wrk; cProfile "
                   "self time, profiler overhead included): by layer, then the top modules")
        out.append(table(["layer", "share"], [[name, f"{share:.1%}"] for name, share in layers(profile)]))
        out.append("")
        out.append(table(["module", "share"], [[m, f"{share:.1%}"] for m, _s, share in profile[:16]]))
    out.append("\nother CPU: cores used by processes other than the server and the load generator during the "
               f"point (worst of the row's points); above {DISTURBED_CORES} a point is retried once, then flagged.")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
