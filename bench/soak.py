"""Soak: gpuguard under steady load while its config and certificate are replaced every 10 s.

``python bench/soak.py`` serves 500 reviews/s on ``/mutate`` for 10 minutes (open loop,
``bench/loadgen/fixedrate``, in back-to-back segments of ``--segment`` seconds) while a thread
rewrites the config file and issues a new serving certificate (same CA) every
``--replace-every`` seconds.  It reports failed reviews (connection errors, non-200 answers and
requests left unfinished; the goal is 0), the p99 of each segment and overall, the server's
resident memory over time, and how many config and certificate reloads the server counted
(they must keep up with the replacements: a reload that silently stops is a failure too).

The server runs with ``--tls-ca`` so every new certificate goes through the full check
(valid now, matches its key, chains to the CA, names 127.0.0.1) before it is served.
``--duration 60`` gives a shortened run.  Results go to ``bench/results/soak.json``.
Loopback only; every loop is bounded by the duration.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from _common import (
    FIXEDRATE,
    ROOT,
    check_loopback,
    code_version,
    gpuguard_cli,
    gpuguard_server,
    machine,
    machine_line,
    running,
    table,
    write_results,
)
from _paths import add_option, check_paths

BODY = Path(__file__).resolve().parent / "bodies" / "gpu-job-pvc.mutate.json"
NEEDS = (BODY,)  # what --check-paths checks (bench/_paths.py)
CONNECTIONS = 16
DEFAULT_CONFIG = (ROOT / "policies" / "default-config.yaml").read_text()


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def metric(text: str, name: str, labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}}"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class Replacer(threading.Thread):
    """Every ``every`` seconds: a new config file (atomic rename) and a new serving certificate."""

    def __init__(self, config: Path, certs: Path, every: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.config, self.certs, self.every, self.stop_event = config, certs, every, stop
        self.replaced = 0
        self.errors: list[str] = []

    def run(self) -> None:
        from gpuguard.certs import write_bundle

        while not self.stop_event.wait(self.every):
            try:
                # The config alternates between two valid versions, so each write is a real change.
                text = DEFAULT_CONFIG + f"\n# soak revision {self.replaced}\n"
                tmp = self.config.with_suffix(".tmp")
                tmp.write_text(text)
                tmp.replace(self.config)
                write_bundle(self.certs, "gpuguard", "gpuguard", ["127.0.0.1"], 30)  # new leaf, same CA
                self.replaced += 1
            except Exception as exc:  # recorded and reported, never hidden
                self.errors.append(f"{type(exc).__name__}: {exc}")


def segment(url: str, rate: int, seconds: int, ca: Path) -> dict[str, Any]:
    check_loopback(url)
    argv = [str(FIXEDRATE), "-u", url, "-b", str(BODY), "-r", str(rate), "-d", str(seconds),
            "-c", str(CONNECTIONS), "-w", "0", "-k", str(ca)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"fixedrate failed ({out.returncode}):\n{out.stderr}")
    return orjson.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=500, help="reviews per second (default 500)")
    parser.add_argument("--duration", type=int, default=600, help="seconds of load (default 600)")
    parser.add_argument("--segment", type=int, default=30, help="seconds per load segment (default 30)")
    parser.add_argument("--replace-every", type=float, default=10.0, help="seconds between replacements")
    parser.add_argument("--quick", action="store_true", help="20 s, 5 s segments, replaced every 2 s: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    if args.quick:
        args.duration, args.segment, args.replace_every = 20, 5, 2.0
    if not FIXEDRATE.exists():
        raise SystemExit("missing bench/.build/fixedrate: run `bash bench/setup.sh` first")
    if not 1 <= args.duration <= 3600 or not 1 <= args.segment <= 120:
        raise SystemExit("--duration must be 1-3600 s and --segment 1-120 s")
    with tempfile.TemporaryDirectory(prefix="gpuguard-soak-") as tmp:
        work = Path(tmp)
        certs = work / "certs"
        gpuguard_cli("certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", str(certs),
                     "--ip", "127.0.0.1")
        server = gpuguard_server(work, certs, DEFAULT_CONFIG, cpu=None, log_level="warning")
        config = work / "gpuguard.config.yaml"
        server.argv += ["--reload-interval", "1", "--tls-ca", str(certs / "ca.crt")]
        with running(server):
            stop = threading.Event()
            replacer = Replacer(config, certs, args.replace_every, stop)
            samples: list[tuple[float, float | None]] = []
            started = time.monotonic()
            sampler_stop = threading.Event()

            def sample() -> None:
                while not sampler_stop.wait(1.0):
                    samples.append((round(time.monotonic() - started, 1), rss_mb(server.pid)))

            sampler = threading.Thread(target=sample, daemon=True)
            samples.append((0.0, rss_mb(server.pid)))
            sampler.start()
            replacer.start()
            segments = []
            remaining = args.duration
            while remaining > 0:
                seconds = min(args.segment, remaining)
                point = segment(f"{server.url}/mutate", args.rate, seconds, certs / "ca.crt")
                point["t_end_s"] = round(time.monotonic() - started, 1)
                point["rss_mb"] = rss_mb(server.pid)
                segments.append(point)
                print(f"  t={point['t_end_s']:>6}s  sent {point['sent']:>6}  failed "
                      f"{point['errors'] + point['non_200'] + point['unfinished']:>3}  p99 {point['p99_ms']:.2f} ms  "
                      f"rss {point['rss_mb']} MB", file=sys.stderr)
                remaining -= seconds
            stop.set()
            sampler_stop.set()
            time.sleep(2.5)  # let the last replacement be picked up before counting reloads
            import ssl
            import urllib.request

            ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            with urllib.request.urlopen(f"{server.url}/metrics", context=ctx, timeout=10) as resp:
                metrics_text = resp.read().decode()
    failed = sum(p["errors"] + p["non_200"] + p["unfinished"] for p in segments)
    sent = sum(p["sent"] for p in segments)
    rss = [r for _, r in samples if r is not None]
    result = {
        "machine": machine(), "code": code_version(),
        "settings": {"rate": args.rate, "duration_s": args.duration, "segment_s": args.segment,
                     "replace_every_s": args.replace_every, "connections": CONNECTIONS, "body": BODY.name},
        "sent": sent, "failed_reviews": failed,
        "p99_ms_overall_max_segment": max(p["p99_ms"] for p in segments),
        "p99_ms_median_segment": statistics.median(p["p99_ms"] for p in segments),
        "max_ms": max(p["max_ms"] for p in segments),
        "replacements": replacer.replaced, "replacement_errors": replacer.errors,
        "config_reloads": {r: metric(metrics_text, "gpuguard_config_reloads_total", f'result="{r}"')
                           for r in ("success", "error")},
        "cert_reloads": {r: metric(metrics_text, "gpuguard_cert_reloads_total", f'result="{r}"')
                         for r in ("success", "error")},
        "rss_mb": {"start": rss[0] if rss else None, "end": rss[-1] if rss else None,
                   "max": max(rss) if rss else None, "every_10s": samples[::10]},
        "segments": segments,
    }
    path = write_results("soak", result)
    print(machine_line(result["machine"]))
    print(table(["t (s)", "sent", "failed", "p50 ms", "p99 ms", "max ms", "RSS MB"],
                [[p["t_end_s"], p["sent"], p["errors"] + p["non_200"] + p["unfinished"], p["p50_ms"], p["p99_ms"],
                  p["max_ms"], p["rss_mb"]] for p in segments]))
    print(f"\n{sent} reviews at {args.rate}/s, {failed} failed; p99 per segment max "
          f"{result['p99_ms_overall_max_segment']:.2f} ms; {replacer.replaced} config+cert replacements, server "
          f"counted config reloads {result['config_reloads']}, cert reloads {result['cert_reloads']}; RSS "
          f"{result['rss_mb']['start']} -> {result['rss_mb']['end']} MB (max {result['rss_mb']['max']}). -> {path}")
    ok = failed == 0 and not replacer.errors and result["cert_reloads"]["error"] == 0 \
        and result["config_reloads"]["error"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
