"""Hostile inputs: how long gpuguard spends on each, against the issue-13 target of 50 ms.

``python bench/hostile.py``.  In-process, no TLS: the time from body bytes to the answer
(``envelope.parse_review`` + ``review.answer``), which is what blocked the event loop.  Before
the fix a GPU quantity of ``"1e800000"`` held it for 16.5 s (time grows with the square of the
exponent) and an alias-bomb config took 11 s and 2 GB.  Timing lives here, never in tests.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time

import orjson
from _common import code_version, machine, machine_line, table, write_results

TARGET_MS = 50.0


def job(quantity: object) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "h", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": quantity}}}]}}}}


def body(obj: dict, deep: int = 0) -> bytes:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"}, "namespace": "ml",
        "operation": "CREATE", "userInfo": {"username": "alice"}, "object": obj}}
    raw = orjson.dumps(review)
    if deep:
        raw = raw.replace(b'"DEEP"', b'{"d":' * deep + b"1" + b"}" * deep)
    return raw


def main() -> int:
    from gpuguard.webhook.config import ConfigError, load_config, parse_config_text
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.server import envelope
    from gpuguard.webhook.server.envelope import ReviewError
    from gpuguard.webhook.server.review import answer
    from gpuguard.webhook.server.state import Active, ServerState, ServeSettings

    config = load_config(None)
    server = ServerState(ServeSettings(), Active(config, Engine(config)))
    deep_obj = job(1)
    deep_obj["metadata"]["annotations"] = "DEEP"
    cases = {"GPU quantity 1e800000": body(job("1e800000")), "GPU quantity 1e5000": body(job("1e5000")),
             "GPU quantity NaN": body(job("NaN")), "GPU quantity Infinity": body(job("Infinity")),
             "object 300 levels deep": body(deep_obj, 300), "object 1,000 levels deep": body(deep_obj, 1000),
             "valid GPU Job (reference)": body(job(1))}
    rows, results = [], {}
    for name, raw in cases.items():
        times, outcome = [], ""
        for _ in range(50):
            started = time.perf_counter()
            try:
                review, _ = answer(server, "mutate", envelope.parse_review(raw), {})
                outcome = "denied 422" if not review["response"]["allowed"] else "allowed"
            except ReviewError as exc:
                outcome = f"HTTP {exc.status}"
            times.append((time.perf_counter() - started) * 1000)
        results[name] = {"median_ms": statistics.median(times), "max_ms": max(times), "outcome": outcome}
        rows.append([name, outcome, round(statistics.median(times), 3), round(max(times), 3),
                     "ok" if max(times) < TARGET_MS else "OVER"])
    bomb = "kind: GpuguardConfig\n" + 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8))
    started = time.perf_counter()
    with contextlib.suppress(ConfigError):
        parse_config_text(bomb, "bomb.yaml")
    bomb_ms = (time.perf_counter() - started) * 1000
    results["config alias bomb (9^9 nodes) refused"] = {"max_ms": bomb_ms}
    rows.append(["config alias bomb (9^9 nodes)", "ConfigError", round(bomb_ms, 3), round(bomb_ms, 3),
                 "ok" if bomb_ms < TARGET_MS else "OVER"])
    info = machine()
    path = write_results("hostile", {"machine": info, "code": code_version(), "target_ms": TARGET_MS,
                                     "cases": results})
    print(machine_line(info))
    print(table(["input", "answer", "median ms", "max ms", f"< {TARGET_MS:.0f} ms"], rows))
    print(f"-> {path}")
    return 0 if all(r[-1] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
