"""Engine benchmark: microseconds per evaluation for each body, and where the time goes.

``python bench/engine.py``.  No server, no TLS: the pure function every shell calls.  For each
body in ``bench/bodies``:

* ``/mutate``   -- ``Engine.evaluate`` of the CREATE object with the mutating policies;
* ``/validate`` -- ``Engine.evaluate`` of the mutated object with the validating policies;
* ``create``    -- both: what one object's CREATE costs gpuguard in total;
* ``allow-all`` -- ``/mutate`` with every policy ``action: off`` (the engine's fixed cost);
* ``request``   -- the whole in-process request path of ``/mutate`` without HTTP: envelope
  parsing, the engine, the response (patch base64), metrics and the JSON log line.

Timing: ``timeit`` with auto-ranging, best of 7 repeats (min, the usual estimator of cost
without noise), plus the median of the repeats.  Then a stage breakdown (wall time of each
stage, measured by wrapping the engine's own calls) and a cProfile summary grouped by module.
Writes ``bench/results/engine.json``; never fails on speed.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import inspect
import io
import os
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
from _common import (
    all_off_config_text,
    cpu_busy_elsewhere,
    machine,
    machine_line,
    profile_by_module,
    quiet_warning,
    table,
    write_results,
)
from _paths import add_option, check_paths

TARGET_US = 150.0  # the target for the GPU Job body (mutate + validate)


def per_call_us(fn: Callable[[], Any], repeat: int = 7, min_time: float = 0.2) -> tuple[float, float]:
    """(best, median) microseconds per call, timeit auto-ranged so each repeat lasts >= ``min_time``."""
    timer = timeit.Timer(fn)
    number = 1
    while True:
        if timer.timeit(number) >= min_time:
            break
        number *= 2
    runs = [t / number * 1e6 for t in timer.repeat(repeat=repeat, number=number)]
    return min(runs), statistics.median(runs)


def contexts() -> tuple[Any, Any]:
    """The request contexts the webhook builds for /mutate and /validate of a human user's CREATE."""
    from gpuguard.webhook.decision import RequestContext

    mutate = RequestContext(operation="CREATE", namespace="ml-team", username="alice@example.com",
                            groups=("ml-engineers", "system:authenticated"), mutate=True, validate=False)
    validate = RequestContext(operation="CREATE", namespace="ml-team", username="alice@example.com",
                              groups=("ml-engineers", "system:authenticated"), mutate=False, validate=True)
    return mutate, validate


@contextlib.contextmanager
def quiet_logging() -> Iterator[None]:
    """gpuguard's real logging config (JSON lines, info level), with the stream sent to /dev/null."""
    from gpuguard.webhook.server import logs

    saved = sys.stderr
    with open(os.devnull, "w") as devnull:
        sys.stderr = devnull
        try:
            logs.configure("info")
        finally:
            sys.stderr = saved
        yield


def request_path(server: Any, body: bytes) -> Callable[[], bytes]:
    """``handle_review`` minus the socket: parse, answer, serialise, metrics and the log line."""
    from gpuguard.webhook.server import envelope, logs, metrics, review

    def run() -> bytes:
        started = time.perf_counter()
        req = envelope.parse_review(body)
        answer, outcome = review.answer(server, "mutate", req, {})
        out = orjson.dumps(answer)
        elapsed = time.perf_counter() - started
        metrics.DURATION.labels(endpoint="mutate").observe(elapsed)
        metrics.REQUESTS.labels(endpoint="mutate", kind=metrics.kind_label(req.kind.group, req.kind.version,
                                                                            req.kind.kind),
                                decision=outcome.decision).inc()
        logs.log_review(endpoint="mutate", uid=req.uid, kind=req.kind.kind, namespace=req.namespace,
                        name=req.object_name(), operation=req.operation, user=req.user_info.username,
                        decision=outcome.decision, policies=outcome.policies, mutated_by=outcome.mutated_by,
                        patch_ops=outcome.patch_ops, latency_ms=round(elapsed * 1000, 3), dry_run=req.dry_run)
        return out

    return run


# ---------------------------------------------------------------- stage breakdown


class StageClock:
    """Wall time per stage, by wrapping the functions the engine calls (restored on exit).

    Stages: envelope parse, object copy (orjson round trip), change detection (the orjson dumps
    around each mutating policy), workload view, each policy, patch diff; "engine glue" is the
    rest of ``evaluate``.  Wrapping adds ~0.2 us per wrapped call, included in the stages.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._restore: list[Callable[[], None]] = []

    def _add(self, stage: str, seconds: float) -> None:
        self.totals[stage] = self.totals.get(stage, 0.0) + seconds

    def wrap(self, stage: str, fn: Callable[..., Any], consume: bool = False) -> Callable[..., Any]:
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            out = fn(*args, **kwargs)
            if consume and out is not None and not isinstance(out, list | tuple | dict):
                out = iter(list(out))
            self._add(stage, clock() - t0)
            return out

        return timed

    def __enter__(self) -> StageClock:
        from gpuguard.policies import REGISTRY
        from gpuguard.webhook.engine import core as engine_mod

        def patch_attr(obj: Any, name: str, value: Any) -> None:
            old = getattr(obj, name)
            object.__setattr__(obj, name, value)
            self._restore.append(lambda: object.__setattr__(obj, name, old))

        patch_attr(engine_mod, "build_view", self.wrap("workload view", engine_mod.build_view))
        patch_attr(engine_mod, "make_patch", self.wrap("patch diff", engine_mod.make_patch))
        patch_attr(engine_mod, "_copy", self.wrap("object copy (orjson loads)", engine_mod._copy))

        clock_self = self

        class TimedOrjson:
            """Stands in for the ``orjson`` module inside gpuguard.webhook.engine.core only."""

            def __getattr__(self, name: str) -> Any:
                return getattr(orjson, name)

            @staticmethod
            def dumps(*args: Any, **kwargs: Any) -> bytes:
                t0 = time.perf_counter()
                out = orjson.dumps(*args, **kwargs)
                # dumps with options is the one copy of the input; without, the per-policy change check
                stage = "object copy (orjson dumps)" if kwargs.get("option") else "change detection (orjson dumps)"
                clock_self._add(stage, time.perf_counter() - t0)
                return out

        patch_attr(engine_mod, "orjson", TimedOrjson())
        for pid, policy in REGISTRY.items():
            patch_attr(policy, "run", self.wrap(f"policy {pid}", policy.run, consume=policy.phase == "validating"))
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._restore):
            undo()
        self._restore.clear()


def _loop_seconds(fn: Callable[[], Any], iterations: int) -> float:
    gc.collect()  # start each repetition from a clean heap, so one full collection does not land in one
    t0 = time.perf_counter()
    for _ in range(iterations):
        fn()
    return time.perf_counter() - t0


def stage_breakdown(run: Callable[[], Any], parse: Callable[[], Any], iterations: int,
                    repeats: int = 5) -> dict[str, float]:
    """Microseconds per iteration in each stage; ``engine glue`` = the unwrapped total minus the stages.

    Each measurement is the best of ``repeats``.  The glue is taken against a run *without* the
    wrappers, so their call overhead is not billed to it; what remains is exemption and profile
    lookup, kind lookup, classification, Decision and Violation building, the GPU totals and the
    annotation.
    """
    best_wrapped, stages = float("inf"), {}
    for _ in range(repeats):
        with StageClock() as clock:
            wrapped = _loop_seconds(run, iterations)
        if wrapped < best_wrapped:
            best_wrapped, stages = wrapped, dict(clock.totals)
    total = min(_loop_seconds(run, iterations) for _ in range(repeats))
    parse_s = min(_loop_seconds(parse, iterations) for _ in range(repeats))
    out = {k: v / iterations * 1e6 for k, v in stages.items()}
    out["engine glue (classify, config, decision)"] = max(0.0, (total - sum(stages.values())) / iterations * 1e6)
    out["envelope parse (orjson + pydantic)"] = parse_s / iterations * 1e6
    return out


def profile_modules(run: Callable[[], Any], iterations: int) -> list[tuple[str, float, float]]:
    """cProfile over ``iterations`` runs, self time grouped by module (which code, not which stage, is hot)."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(iterations):
        run()
    prof.disable()
    with tempfile.NamedTemporaryFile(suffix=".prof", delete=False) as f:
        path = Path(f.name)
    try:
        prof.dump_stats(str(path))
        return profile_by_module(path, top=15)
    finally:
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Time every body, break one create into stages, profile, print the tables and write engine.json."""
    parser = argparse.ArgumentParser(description="gpuguard engine: microseconds per evaluation")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    from bodies import DESCRIPTIONS, NAMES, ensure_bodies

    from gpuguard.webhook.config import load_config, parse_config_text
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.server import envelope
    from gpuguard.webhook.server.state import Active, ServerState, ServeSettings

    busy = cpu_busy_elsewhere(0.5)
    bodies = ensure_bodies()
    config = load_config(None)
    engine = Engine(config)
    off_engine = Engine(parse_config_text(all_off_config_text(), "all-off"))
    server = ServerState(ServeSettings(), Active(config, engine))
    mctx, vctx = contexts()
    # Call the engine as the webhook does: its parsed JSON body may serve as the diff's "before" side.
    webhook_kw = {"plain_json": True} if "plain_json" in inspect.signature(engine.evaluate).parameters else {}
    repeat, min_time = (2, 0.02) if args.quick else (7, 0.2)

    rows, results = [], {}
    with quiet_logging():
        for name in NAMES:
            mbody, vbody = bodies[name]["mutate"], bodies[name]["validate"]
            mobj = orjson.loads(mbody)["request"]["object"]
            vobj = orjson.loads(vbody)["request"]["object"]
            cases: dict[str, Callable[[], Any]] = {
                "parse": lambda b=mbody: envelope.parse_review(b),
                "mutate": lambda o=mobj: engine.evaluate(o, mctx, **webhook_kw),
                "validate": lambda o=vobj: engine.evaluate(o, vctx, **webhook_kw),
                "create": lambda m=mobj, v=vobj: (engine.evaluate(m, mctx, **webhook_kw),
                                                  engine.evaluate(v, vctx, **webhook_kw)),
                "allow-all": lambda o=mobj: off_engine.evaluate(o, mctx, **webhook_kw),
                "request": request_path(server, mbody),
            }
            timings = {case: per_call_us(fn, repeat, min_time) for case, fn in cases.items()}
            decision = engine.evaluate(mobj, mctx)
            results[name] = {"bytes": len(mbody), "patch_ops": len(decision.patch),
                             "us": {k: {"best": round(v[0], 2), "median": round(v[1], 2)} for k, v in timings.items()}}
            rows.append([name, len(mbody), len(decision.patch), *(timings[c][0] for c in
                                                                  ("parse", "mutate", "validate", "create",
                                                                   "allow-all", "request")),
                         timings["create"][1]])
            print(f"  {name:15} create {timings['create'][0]:8.1f} us", file=sys.stderr)

        iterations = 30 if args.quick else 500
        breakdown: dict[str, dict[str, float]] = {}
        for name in NAMES:
            mobj = orjson.loads(bodies[name]["mutate"])["request"]["object"]
            vobj = orjson.loads(bodies[name]["validate"])["request"]["object"]
            n = max(20, iterations // 10) if name == "pod-60kb" else iterations
            breakdown[name] = stage_breakdown(
                lambda m=mobj, v=vobj: (engine.evaluate(m, mctx, **webhook_kw), engine.evaluate(v, vctx, **webhook_kw)),
                lambda b=bodies[name]["mutate"], c=bodies[name]["validate"]: (envelope.parse_review(b),
                                                                             envelope.parse_review(c)),
                n)
        job_m = orjson.loads(bodies["gpu-job-pvc"]["mutate"])["request"]["object"]
        job_v = orjson.loads(bodies["gpu-job-pvc"]["validate"])["request"]["object"]
        modules = profile_modules(lambda: (engine.evaluate(job_m, mctx, **webhook_kw),
                                           engine.evaluate(job_v, vctx, **webhook_kw)), iterations)

    out = io.StringIO()
    out.write(f"Engine: microseconds per call (best of {repeat}; 'create' median in the last column; "
              f"evaluate{'(..., plain_json=True)' if webhook_kw else ''} as the webhook calls it)\n")
    out.write(table(["body", "bytes", "patch ops", "parse", "mutate", "validate", "create", "allow-all",
                     "request (mutate)", "create median"], rows))
    job = results["gpu-job-pvc"]["us"]["create"]["best"]
    out.write(f"\n\nTarget: under {TARGET_US:.0f} us per evaluation for the GPU Job body: mutate "
              f"{results['gpu-job-pvc']['us']['mutate']['best']:.0f} us, validate "
              f"{results['gpu-job-pvc']['us']['validate']['best']:.0f} us, create (both) {job:.0f} us\n")
    stages = sorted({s for b in breakdown.values() for s in b}, key=lambda s: -breakdown["gpu-job-pvc"].get(s, 0))
    out.write("\nWhere a create's time goes (mutate + validate evaluation, plus parsing both envelopes; "
              "us per create, stage wall time)\n")
    out.write(table(["stage", *NAMES], [[s, *(breakdown[n].get(s, 0.0) for n in NAMES)] for s in stages]))
    out.write("\n\ncProfile self time by module (gpu-job-pvc create, profiler overhead included)\n")
    out.write(table(["module", "share"], [[m, f"{share:.1%}"] for m, _s, share in modules]))
    if warning := quiet_warning(busy):
        out.write(f"\n\n{warning}")
    text = out.getvalue()
    info = machine()
    print(f"\nmachine: {machine_line(info)}\n")
    print(text)
    path = write_results("engine", {"descriptions": DESCRIPTIONS, "evaluate_kwargs": webhook_kw,
                                    "cpu_busy_before": busy, "results": results,
                                    "breakdown_us": breakdown, "profile_by_module": modules, "tables": text})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
