"""One tenant's flood, another tenant's review: fair queuing per requester (issue 32's goal: within 2x of quiet).

``gpuguard serve`` (one worker, pinned to CPU 0; this driver on CPU 1) answers an ordinary review from ``bob`` in
``team-b`` (the 1.8 KB GPU Job of ``bench/bodies``, /mutate) one after another, first alone, then while a
ServiceAccount of ``team-a`` keeps FLOOD parallel dry runs of the heaviest body the default bounds take (a GPU Job
padded to just under 3 MiB, /validate) in flight.  Rounds are interleaved (alone, beside, alone, ...) so both
phases see the same machine.  Two servers:

* ``fair`` — the defaults: one review of a requester judged at a time, 32 waiting, past that 429;
* ``one queue`` — ``--requester-concurrency 4`` and unbounded queues: the engine's four threads shared by
  whoever comes first, as before fair queuing.

Recorded: bob's p50/p99 alone and beside the flood, their ratio (the goal: p99 beside <= 2x p99 alone), and
what the flood got (judged, refused with 429).  ``--quick`` (a smaller flood, few samples, not recorded unless
``GPUGUARD_BENCH_RESULTS`` says where) is a smoke run.  Never fails on speed; exit 1 when bob's review is not
answered 200 with its own uid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
from _common import (
    code_version,
    cpu_busy_elsewhere,
    gpuguard_server,
    machine,
    machine_line,
    make_certs,
    quiet_warning,
    running,
    table,
    wait_quiet,
    write_results,
)
from _paths import add_option, check_paths

NORMAL_BODY = Path(__file__).resolve().parent / "bodies" / "gpu-job-pvc.mutate.json"
NEEDS = (NORMAL_BODY,)
FLOOD_BYTES = 3 * 1024 * 1024 - 96 * 1024  # under the default maxBodyBytes (3 MiB) with the envelope
SERVERS = {"fair": [],
           "one queue": ["--requester-concurrency", "4", "--requester-queue", "1000000",
                         "--requester-queue-bytes", str(1 << 40)]}
HEADERS = {"content-type": "application/json"}


def bob_review() -> bytes:
    body = orjson.loads(NORMAL_BODY.read_bytes())
    body["request"]["userInfo"]["username"] = "bob@example.com"
    body["request"]["namespace"] = body["request"]["object"]["metadata"]["namespace"] = "team-b"
    return orjson.dumps(body)


def flood_review() -> bytes:
    body = orjson.loads(NORMAL_BODY.read_bytes())
    request = body["request"]
    request["userInfo"] = {"username": "system:serviceaccount:team-a:sweeper", "groups": [
        "system:serviceaccounts", "system:serviceaccounts:team-a", "system:authenticated"]}
    request["namespace"] = request["object"]["metadata"]["namespace"] = "team-a"
    request["dryRun"] = True
    request["object"]["metadata"]["annotations"] = {"example.com/blob": ""}
    pad = FLOOD_BYTES - len(orjson.dumps(body))
    request["object"]["metadata"]["annotations"]["example.com/blob"] = "x" * pad
    return orjson.dumps(body)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _flood(url: str, verify: str, raw: bytes, stop: threading.Event, got: dict[str, int]) -> None:
    import httpx

    with httpx.Client(base_url=url, verify=verify, timeout=60) as client:
        while not stop.is_set():
            try:
                answer = client.post("/validate", content=raw, headers=HEADERS).json()["response"]
            except (httpx.HTTPError, ValueError, KeyError):
                got["error"] = got.get("error", 0) + 1
                continue
            status = answer.get("status", {}).get("code") if not answer["allowed"] else 200
            key = "refused (429)" if status == 429 else "judged"
            got[key] = got.get(key, 0) + 1


def probe(extra: list[str], flood: int, rounds: int, per_round: int) -> dict[str, Any]:
    """bob's review latency (ms) alone and beside ``flood`` parallel heavy dry runs, rounds interleaved."""
    import httpx

    normal, heavy = bob_review(), flood_review()
    with tempfile.TemporaryDirectory(prefix="gpuguard-fairness-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        server = gpuguard_server(Path(tmp), certs, None, cpu=0 if (os.cpu_count() or 1) > 1 else None,
                                 log_level="warning")
        server.argv += extra
        samples: dict[str, list[float]] = {"alone": [], "beside": []}
        got: dict[str, int] = {}
        wrong: list[str] = []
        with running(server), httpx.Client(base_url=server.url, verify=str(certs / "ca.crt"), timeout=60) as client:
            for _ in range(rounds):
                for phase in ("alone", "beside"):
                    stop = threading.Event()
                    threads = [threading.Thread(target=_flood, args=(server.url, str(certs / "ca.crt"), heavy, stop,
                                                                     got)) for _ in range(flood if phase == "beside"
                                                                                           else 0)]
                    for thread in threads:
                        thread.start()
                    if threads:
                        time.sleep(1.0)  # the flood's bodies are in flight
                    for _ in range(per_round):
                        started = time.perf_counter()
                        response = client.post("/mutate", content=normal, headers=HEADERS)
                        samples[phase].append((time.perf_counter() - started) * 1000)
                        answer = response.json().get("response", {}) if response.status_code == 200 else {}
                        if answer.get("uid") != orjson.loads(normal)["request"]["uid"] or not answer.get("allowed"):
                            wrong.append(f"bob's review: HTTP {response.status_code} {response.text[:200]}")
                    stop.set()
                    for thread in threads:
                        thread.join()
    out: dict[str, Any] = {phase: {"p50_ms": round(statistics.median(v), 2), "p99_ms": round(_percentile(v, 0.99), 2),
                                   "n": len(v)} for phase, v in samples.items()}
    out["flood"] = got
    out["wrong"] = wrong[:5]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small flood and few samples: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    if (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the load on the other CPU than the server
    busy = cpu_busy_elsewhere(0.5) if args.quick else wait_quiet(60)
    flood, rounds, per_round = (8, 1, 20) if args.quick else (64, 3, 100)
    results = {name: probe(extra, flood, rounds, per_round) for name, extra in SERVERS.items()}
    rows = [[name, r["alone"]["p50_ms"], r["alone"]["p99_ms"], r["beside"]["p50_ms"], r["beside"]["p99_ms"],
             round(r["beside"]["p99_ms"] / r["alone"]["p99_ms"], 1) if r["alone"]["p99_ms"] else "-",
             r["flood"].get("judged", 0), r["flood"].get("refused (429)", 0), r["flood"].get("error", 0)]
            for name, r in results.items()]
    text = "\n".join([
        f"bob's GPU Job review (/mutate, ms) alone and beside {flood} parallel ~3 MiB dry runs from one "
        f"ServiceAccount of another namespace (/validate); rounds interleaved",
        table(["server", "alone p50", "alone p99", "beside p50", "beside p99", "p99 ratio (goal <= 2)",
               "flood judged", "flood refused", "flood errors"], rows)])
    if warning := quiet_warning(busy):
        text += "\n\n" + warning
    info = machine()
    print(machine_line(info))
    print(text)
    wrong = [w for r in results.values() for w in r["wrong"]]
    if not args.quick or os.environ.get("GPUGUARD_BENCH_RESULTS"):
        path = write_results("fairness", {"machine": info, "code": code_version(), "quick": args.quick,
                                          "flood": flood, "cpu_busy_before": busy, "servers": results,
                                          "tables": text})
        print(f"-> {path}")
    if wrong:
        print("UNEXPECTED ANSWERS:", *wrong, sep="\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
