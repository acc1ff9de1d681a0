"""Hostile inputs: how long gpuguard spends on each, against the 50 ms engine target, and what a
normal review pays while a hostile one is judged.

``python bench/hostile.py [--quick]``.  Two parts:

* **Time per input**, in-process, no TLS: body bytes to the answer (``envelope.parse_review`` +
  ``review.answer``, the work one engine thread does).  Inputs that are malformed (a GPU
  quantity of ``"1e800000"``, an object 1,000 levels deep, a config alias bomb) and inputs that
  are valid but large in the shape algorithms care about: Argo steps nested as deep and as wide
  as the bounds allow, DAGs at the task bound (the heaviest-antichain max flow) and past it
  (refused naming the bound), a JobSet and a Pod at the pod-template and container bounds and
  past them, up to the apiserver's 3 MiB (refused naming the bound).
* **The probe**, over TLS against ``gpuguard serve``: a normal GPU Job review's and ``/readyz``'s
  latency while another client keeps the server busy with one of the heaviest judged bodies (a
  JobSet at the pod-template bound),
  interleaved with rounds without it (same process, same minute), with 1 and 2 workers.

Exit status 1 when an input is answered other than expected (judged, refused, denied) or a part
breaks, never on speed: ``--quick`` (smaller shapes, a short probe, one worker, results not
recorded unless ``GPUGUARD_BENCH_RESULTS`` says where) is the smoke run ``bench/smoke.py`` runs.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
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

TARGET_MS = 50.0
NORMAL_BODY = Path(__file__).resolve().parent / "bodies" / "gpu-job-pvc.mutate.json"  # the probe's review
NEEDS = (NORMAL_BODY,)  # what --check-paths checks (bench/_paths.py)
MIB = 1024 * 1024
GPU = {"limits": {"nvidia.com/gpu": 1}}
_GROUPS = {"Job": ("batch", "v1", "jobs"), "Pod": ("", "v1", "pods"),
           "Workflow": ("argoproj.io", "v1alpha1", "workflows"), "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets")}


def job(quantity: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": quantity}}}]}}}}


def body(obj: dict, deep: int = 0, uid: str = "u") -> bytes:
    group, version, resource = _GROUPS[obj["kind"]]
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": resource}, "namespace": "ml",
        "operation": "CREATE", "userInfo": {"username": "alice"}, "object": obj}}
    raw = orjson.dumps(review)
    if deep:
        raw = raw.replace(b'"DEEP"', b'{"d":' * deep + b"1" + b"}" * deep)
    return raw


# ---------------------------------------------------------------- algorithmic shapes


def _workflow(templates: list[dict], entrypoint: str = "main") -> dict:
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"entrypoint": entrypoint, "templates": templates}}


def _pods(count: int) -> list[dict]:
    return [{"name": f"p{k}", "container": {"image": "x", "resources": GPU}} for k in range(count)]


def argo_nested_steps(depth: int) -> dict:
    """``s0`` calls ``s1`` ... ``s{depth-1}``, each beside a GPU pod: nesting far past any recursion limit."""
    steps = [{"name": f"s{i}", "steps": [[{"name": "pod", "template": "p0"},
                                          {"name": "deeper", "template": f"s{i + 1}"}]]} for i in range(depth)]
    return _workflow([*steps, *_pods(1)], "s0")


def argo_wide_steps(count: int) -> dict:
    """One steps template of ``count`` groups, one step each, cycling over 50 pod templates."""
    groups = [[{"name": f"s{i}", "template": f"p{i % 50}", "withItems": [1, 2]}] for i in range(count)]
    return _workflow([{"name": "main", "steps": groups}, *_pods(50)])


def argo_dag(tasks: int, templates: int, fan_in: int, seed: int = 1) -> dict:
    """A DAG of ``tasks`` tasks over ``templates`` GPU pod templates, each task after ``fan_in`` random earlier ones."""
    rng = random.Random(seed)
    dag = [{"name": f"t{i}", "template": f"p{i % templates}",
            "dependencies": [f"t{j}" for j in rng.sample(range(i), min(i, fan_in))]} for i in range(tasks)]
    return _workflow([{"name": "main", "dag": {"tasks": dag}}, *_pods(templates)])


def argo_wide_dag(tasks: int) -> dict:
    """A single-template DAG with no dependencies: the issue's 219 KB / 3,000-task shape, any size."""
    return _workflow([{"name": "main", "dag": {"tasks": [{"name": f"t{i}", "template": "p0"} for i in range(tasks)]}},
                      *_pods(1)])


def jobset(replicated: int) -> dict:
    def one(i: int) -> dict:
        return {"name": f"r{i}", "replicas": 1, "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "x", "resources": GPU}]}}}}}

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"replicatedJobs": [one(i) for i in range(replicated)]}}


def many_containers(count: int) -> dict:
    containers = [{"name": f"c{i}", "image": "x", "resources": {"limits": {"cpu": "1"}}} for i in range(count)]
    containers[0]["resources"] = GPU
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"restartPolicy": "Never", "containers": containers}}


def _fill(build: Callable[[int], dict], size: int = 3 * MIB - 64 * 1024) -> int:
    """The largest count whose body stays under ``size`` bytes (the apiserver's 3 MiB, less room)."""
    low, high = 1, 2
    while len(body(build(high))) < size:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if len(body(build(mid))) < size else (low, mid)
    return low


# ---------------------------------------------------------------- time per input


def cases(quick: bool) -> dict[str, tuple[bytes, str]]:
    """``name: (body, expected answer)``; expected: judged | refused:BOUND | denied 422 | HTTP 400."""
    from gpuguard.webhook.engine.prechecks import MAX_CONTAINERS, MAX_POD_TEMPLATES
    from gpuguard.workloads.kinds.argo import workflow as argo

    deep_obj = job(1)
    deep_obj["metadata"]["annotations"] = "DEEP"
    scale = 10 if quick else 1
    depth = argo.MAX_TEMPLATES - 1 if not quick else 200
    out = {"GPU quantity 1e800000": (body(job("1e800000")), "denied 422"),
           "GPU quantity NaN": (body(job("NaN")), "denied 422"),
           "object 1,000 levels deep": (body(deep_obj, 1000), "HTTP 400"),
           "valid GPU Job (reference)": (body(job(1)), "judged"),
           f"Argo steps nested {depth} deep": (body(argo_nested_steps(depth)), "judged"),
           f"Argo {argo.MAX_STEPS // scale:,} sequential steps": (body(argo_wide_steps(argo.MAX_STEPS // scale)),
                                                                  "judged"),
           f"Argo DAG {argo.MAX_DAG_TASKS // scale:,} tasks, 7 templates, fan-in 3":
               (body(argo_dag(argo.MAX_DAG_TASKS // scale, 7, 3)), "judged"),
           f"Argo DAG {argo.MAX_DAG_TASKS // scale:,} tasks, 1 template, fan-in 10":
               (body(argo_dag(argo.MAX_DAG_TASKS // scale, 1, 10)), "judged"),
           f"Argo DAG {argo.MAX_DAG_TASKS // scale:,} tasks, 3 templates, fan-in 10":
               (body(argo_dag(argo.MAX_DAG_TASKS // scale, 3, 10)), "judged"),
           "Argo DAG 3,000 tasks, 1 template": (body(argo_wide_dag(3000)), "refused:MAX_DAG_TASKS"),
           "Argo DAG 20,000 tasks, 1 template": (body(argo_wide_dag(20000)), "refused:MAX_DAG_TASKS")}
    out[f"JobSet {MAX_POD_TEMPLATES} replicatedJobs (the bound)"] = (body(jobset(MAX_POD_TEMPLATES)), "judged")
    out[f"Pod {MAX_CONTAINERS:,} containers (the bound)"] = (body(many_containers(MAX_CONTAINERS)), "judged")
    if not quick:
        for label, build, bound in (("JobSet {n:,} replicatedJobs (~3 MiB)", jobset, "MAX_POD_TEMPLATES"),
                                    ("Pod {n:,} containers (~3 MiB)", many_containers, "MAX_CONTAINERS")):
            n = _fill(build)
            out[label.format(n=n)] = (body(build(n)), f"refused:{bound}")
    return out


def _outcome(review: dict) -> str:
    response = review["response"]
    message = (response.get("status") or {}).get("message", "")
    if "could not check" in message:
        bound = next((w.strip("()") for w in message.split() if w.strip("()").startswith("MAX_")), "?")
        return f"refused:{bound}"
    return "judged"


def time_inputs(quick: bool) -> tuple[list[list[Any]], dict[str, Any], list[str]]:
    from gpuguard.webhook.config import ConfigError, load_config, parse_config_text
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.server import envelope
    from gpuguard.webhook.server.envelope import ReviewError
    from gpuguard.webhook.server.review import answer
    from gpuguard.webhook.server.state import Active, ServerState, ServeSettings

    config = load_config(None)
    server = ServerState(ServeSettings(), Active(config, Engine(config)))
    rows, results, wrong = [], {}, []
    for name, (raw, expected) in cases(quick).items():
        times, cpu, outcome = [], [], ""
        runs = 3 if quick else (5 if len(raw) > 100_000 else 30)
        for _ in range(runs):
            started, cpu_started = time.perf_counter(), time.thread_time()
            try:
                review, _ = answer(server, "mutate", envelope.parse_review(raw), {})
                outcome = _outcome(review) if expected != "denied 422" else (
                    "denied 422" if not review["response"]["allowed"] else "allowed")
            except ReviewError as exc:
                outcome = f"HTTP {exc.status}"
            times.append((time.perf_counter() - started) * 1000)
            cpu.append((time.thread_time() - cpu_started) * 1000)
        if outcome != expected:
            wrong.append(f"{name}: expected {expected}, got {outcome}")
        results[name] = {"bytes": len(raw), "median_ms": statistics.median(times), "max_ms": max(times),
                         "cpu_median_ms": statistics.median(cpu), "outcome": outcome}
        rows.append([name, f"{len(raw):,}", outcome, round(statistics.median(cpu), 2),
                     round(statistics.median(times), 2), round(max(times), 2),
                     "ok" if statistics.median(cpu) < TARGET_MS else "OVER"])
        print(f"  {name:50} {outcome:24} {statistics.median(times):9.2f} ms", file=sys.stderr)
    bomb = "kind: GpuguardConfig\n" + 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
    started = time.perf_counter()
    with contextlib.suppress(ConfigError):
        parse_config_text(bomb, "bomb.yaml")
    bomb_ms = (time.perf_counter() - started) * 1000
    results["config alias bomb (9^9 nodes) refused"] = {"max_ms": bomb_ms}
    rows.append(["config alias bomb (9^9 nodes)", "-", "ConfigError", "-", round(bomb_ms, 2), round(bomb_ms, 2),
                 "ok" if bomb_ms < TARGET_MS else "OVER"])
    return rows, results, wrong


# ---------------------------------------------------------------- the probe


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def probe(workers: int, rounds: int, per_round: int, hostile: bytes) -> dict[str, Any]:
    """Normal-review and /readyz latency (ms) with and without a hostile review in flight, interleaved."""
    import httpx

    normal = NORMAL_BODY.read_bytes()
    headers = {"content-type": "application/json"}
    with tempfile.TemporaryDirectory(prefix="gpuguard-hostile-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        server = gpuguard_server(Path(tmp), certs, None, cpu=None, log_level="warning")
        if workers > 1:
            server.argv += ["--workers", str(workers)]
        with running(server):
            verify = str(certs / "ca.crt")
            samples: dict[str, list[float]] = {f"{what} {phase}": [] for what in ("review", "readyz")
                                               for phase in ("alone", "beside hostile")}
            hostile_ms: list[float] = []
            with httpx.Client(base_url=server.url, verify=verify, timeout=30) as client:
                for _ in range(rounds):
                    for phase in ("alone", "beside hostile"):
                        stop = threading.Event()
                        busy = threading.Thread(target=_hammer, args=(server.url, verify, hostile, stop, hostile_ms))
                        if phase != "alone":
                            busy.start()
                            time.sleep(0.05)
                        for _ in range(per_round):
                            for what, call in (("review", lambda: client.post("/mutate", content=normal,
                                                                                headers=headers)),
                                               ("readyz", lambda: client.get("/readyz"))):
                                started = time.perf_counter()
                                response = call()
                                samples[f"{what} {phase}"].append((time.perf_counter() - started) * 1000)
                                if response.status_code != 200:
                                    raise RuntimeError(f"{what}: HTTP {response.status_code}")
                        stop.set()
                        if busy.is_alive():
                            busy.join()
    out: dict[str, Any] = {k: {"p50_ms": round(statistics.median(v), 2), "p99_ms": round(_percentile(v, 0.99), 2),
                               "n": len(v)} for k, v in samples.items()}
    out["hostile review ms (median)"] = round(statistics.median(hostile_ms), 1) if hostile_ms else None
    return out


def _hammer(url: str, verify: str, raw: bytes, stop: threading.Event, took: list[float]) -> None:
    """Send the hostile review again and again until told to stop."""
    import httpx

    with httpx.Client(base_url=url, verify=verify, timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            client.post("/mutate", content=raw, headers={"content-type": "application/json"})
            took.append((time.perf_counter() - started) * 1000)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller shapes, a short probe: a smoke run")
    parser.add_argument("--no-probe", action="store_true", help="time the inputs only")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    busy = cpu_busy_elsewhere(0.5) if args.quick else wait_quiet(60)
    rows, results, wrong = time_inputs(args.quick)
    out = [f"Time per input (parse + engine in one thread: its CPU time and wall time, median of runs; target "
           f"{TARGET_MS:.0f} ms of CPU)",
           table(["input", "bytes", "answer", "cpu ms", "wall ms", "max wall ms", f"< {TARGET_MS:.0f} ms"], rows)]
    probes: dict[str, Any] = {}
    if not args.no_probe:
        from gpuguard.webhook.engine.prechecks import MAX_POD_TEMPLATES

        hostile = body(jobset(MAX_POD_TEMPLATES))
        for workers in (1,) if args.quick else (1, 2):
            probes[f"{workers} worker(s)"] = probe(workers, 1 if args.quick else 3, 10 if args.quick else 100,
                                                   hostile)
        prow = []
        for label, figures in probes.items():
            for what in ("review", "readyz"):
                alone, beside = figures[f"{what} alone"], figures[f"{what} beside hostile"]
                prow.append([label, what, alone["p50_ms"], alone["p99_ms"], beside["p50_ms"], beside["p99_ms"],
                             round(beside["p99_ms"] / alone["p99_ms"], 1) if alone["p99_ms"] else "-",
                             figures["hostile review ms (median)"]])
        out += ["", "A normal GPU Job review (/mutate) and /readyz over TLS, alone and while another client keeps "
                "sending one of the heaviest judged bodies, a JobSet at MAX_POD_TEMPLATES (ms; rounds interleaved)",
                table(["server", "request", "alone p50", "alone p99", "beside p50", "beside p99", "p99 ratio",
                       "hostile review"], prow)]
    if warning := quiet_warning(busy):
        out += ["", warning]
    if wrong:
        out += ["", "UNEXPECTED ANSWERS:", *wrong]
    text = "\n".join(out)
    info = machine()
    print(machine_line(info))
    print(text)
    if not args.quick or write_elsewhere():
        path = write_results("hostile", {"machine": info, "code": code_version(), "target_ms": TARGET_MS,
                                         "quick": args.quick, "cpu_busy_before": busy, "cases": results,
                                         "probe": probes, "tables": text})
        print(f"-> {path}")
    return 1 if wrong else 0


def write_elsewhere() -> bool:
    import os

    return bool(os.environ.get("GPUGUARD_BENCH_RESULTS"))


if __name__ == "__main__":
    sys.exit(main())
