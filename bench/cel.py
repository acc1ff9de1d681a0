"""CEL library benchmark: which Python CEL implementation evaluates custom policies fastest.

``python bench/cel.py [--quick]``.  Why: ``customPolicies`` run on every admission request, so
the CEL runtime is on the webhook's hot path.  Three maintained implementations are on PyPI:

* ``common-expression-language`` (module ``cel``): Rust bindings (the ``cel`` crate);
* ``cel-expr-python`` (module ``cel_expr_python``): Python bindings of Google's C++ runtime,
  with the type checker (unknown variables and bad overloads are compile errors);
* ``cel-python`` (module ``celpy``): pure Python.

Each library evaluates the same five rules (the ones ``docs/custom-policies.md`` shows, one of
them with the ``quantity()`` helper) on the object of the GPU Job body
(``bench/bodies/gpu-job-pvc.validate.json``), the way gpuguard does it: per request the
variables are converted once and all five programs run against them.  Reported per library:
compile time per rule, and microseconds per evaluation of all five (best of 7 ``timeit``
repeats, plus the median).  Then the chosen library through gpuguard's whole engine: a GPU Job
evaluation with and without five custom rules.  Writes ``bench/results/cel.json``; never fails
on speed (a library that gets a rule *wrong* is reported as such).

Speed is one half of the choice; the other is where a runtime installs: gpuguard's image is built
for linux/amd64 and linux/arm64 from wheels only (``tests/unit/project/test_platforms.py``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
from _common import HERE, ROOT, machine, quiet_warning, wait_quiet, write_results
from _paths import add_option, check_paths

# This file is named like the Rust library's module (``cel``): take bench/ off the import path
# once ``_common`` is in, so that ``import cel`` finds the library, not this script.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
BODY = ROOT / "bench" / "bodies" / "gpu-job-pvc.validate.json"
NEEDS = (BODY,)  # what --check-paths checks (bench/_paths.py)

#: (name, scope, expression): object-scope rules see ``object``/``workload``/``request``,
#: podTemplate rules also ``podSpec``.  All five hold for the GPU Job body (expected: True).
RULES: tuple[tuple[str, str, str], ...] = (
    ("team-label", "object", "has(object.metadata.labels) && 'app.kubernetes.io/name' in object.metadata.labels"),
    ("registry", "podTemplate",
     "podSpec.containers.all(c, c.image.startsWith('ghcr.io/example/') || c.image.startsWith('nvcr.io/'))"),
    ("no-host-network", "podTemplate", "!has(podSpec.hostNetwork) || podSpec.hostNetwork == false"),
    ("gpu-cap", "object", "workload.acceleratorsTotal <= 16 && request.operation in ['CREATE', 'UPDATE']"),
    ("memory-cap", "podTemplate",
     "podSpec.containers.all(c, !has(c.resources.limits) || !('memory' in c.resources.limits) || "
     "!quantity(c.resources.limits.memory).isGreaterThan(quantity('512Gi')))"),
)


def _quantity_value(text: str) -> Decimal:
    from kubernetes.utils.quantity import parse_quantity

    return Decimal(parse_quantity(text))


def _variables(obj: dict) -> dict[str, Any]:
    return {
        "object": obj,
        "podSpec": obj["spec"]["template"]["spec"],
        "workload": {"kind": "Job", "class": "training", "acceleratorsPerPod": 2, "acceleratorsTotal": 2},
        "request": {"operation": "CREATE", "namespace": "ml-team",
                    "userInfo": {"username": "alice", "groups": ["system:authenticated"]}},
    }


# ---------------------------------------------------------------- one adapter per library


def _rust() -> tuple[Callable[[str], Any], Callable[[list, dict], list]]:
    import cel

    def q(text: str) -> dict:
        return {"quantity": text}

    functions = {"quantity": q,
                 "isGreaterThan": lambda a, b: _quantity_value(a["quantity"]) > _quantity_value(b["quantity"])}

    def run(programs: list, variables: dict) -> list:
        ctx = cel.Context(variables, functions)
        return [p.execute(ctx) for p in programs]

    return cel.compile, run


def _cpp() -> tuple[Callable[[str], Any], Callable[[list, dict], list]]:
    from cel_expr_python import cel

    qtype = cel.Type.Map(cel.Type.STRING, cel.Type.STRING)
    ext = cel.CelExtension("k8s", [
        cel.FunctionDecl("quantity", [cel.Overload("quantity_string", return_type=qtype,
                                                   parameters=[cel.Type.STRING], impl=lambda s: {"quantity": s})]),
        cel.FunctionDecl("isGreaterThan", [cel.Overload(
            "quantity_isGreaterThan", return_type=cel.Type.BOOL, parameters=[qtype, qtype], is_member=True,
            impl=lambda a, b: _quantity_value(a["quantity"]) > _quantity_value(b["quantity"]))]),
    ])
    env = cel.NewEnv(variables={n: cel.Type.DYN for n in ("object", "podSpec", "workload", "request")},
                     extensions=[ext])

    def run(programs: list, variables: dict) -> list:
        activation = env.Activation(variables)
        return [p.eval(activation).value() for p in programs]

    return env.compile, run


def _py() -> tuple[Callable[[str], Any], Callable[[list, dict], list]]:
    import celpy
    from celpy import celtypes

    env = celpy.Environment()

    def q(text: Any) -> celtypes.MapType:
        return celtypes.MapType({celtypes.StringType("quantity"): text})

    def greater(a: Any, b: Any) -> celtypes.BoolType:
        return celtypes.BoolType(_quantity_value(str(a[celtypes.StringType("quantity")]))
                                 > _quantity_value(str(b[celtypes.StringType("quantity")])))

    functions = {"quantity": q, "isGreaterThan": greater}

    def compile_(expr: str) -> Any:
        return env.program(env.compile(expr), functions=functions)

    def run(programs: list, variables: dict) -> list:
        activation = {k: celpy.json_to_cel(v) for k, v in variables.items()}
        return [bool(p.evaluate(activation)) for p in programs]

    return compile_, run


LIBRARIES: dict[str, tuple[str, Callable[[], tuple]]] = {
    "common-expression-language": ("cel", _rust),
    "cel-expr-python": ("cel_expr_python", _cpp),
    "cel-python": ("celpy", _py),
}


def _time(fn: Callable[[], Any], quick: bool) -> dict[str, float]:
    """Wall time (best and median of the repeats) and this thread's CPU time (best).

    Why both: on the shared 2-core machine other work stretches wall time by 2-3x while the
    CPU time the evaluation itself uses stays close to what an idle machine shows.
    """
    timer = timeit.Timer(fn)
    number, _ = timer.autorange()
    repeats = timer.repeat(repeat=3 if quick else 7, number=number)
    per = [r / number * 1e6 for r in repeats]
    cpu = timeit.Timer(fn, timer=time.thread_time).repeat(repeat=3 if quick else 7, number=number)
    return {"best_us": round(min(per), 1), "median_us": round(statistics.median(per), 1),
            "cpu_best_us": round(min(cpu) / number * 1e6, 1)}


def bench_library(name: str, obj: dict, quick: bool) -> dict[str, Any]:
    from importlib import metadata

    try:
        compile_, run = LIBRARIES[name][1]()
    except ImportError as exc:
        return {"library": name, "installed": False, "error": str(exc)}
    out: dict[str, Any] = {"library": name, "installed": True, "version": metadata.version(name)}
    start = time.perf_counter()
    try:
        programs = [compile_(expr) for _, _, expr in RULES]
    except Exception as exc:  # a library that cannot compile the rules is reported, not fatal
        out["error"] = f"compile: {type(exc).__name__}: {exc}"
        return out
    out["compile_us_per_rule"] = round((time.perf_counter() - start) / len(RULES) * 1e6, 1)
    variables = _variables(obj)
    try:
        results = run(programs, variables)
    except Exception as exc:
        out["error"] = f"evaluate: {type(exc).__name__}: {exc}"
        return out
    out["correct"] = results == [True] * len(RULES)
    out["eval_5_rules"] = _time(lambda: run(programs, variables), quick)
    return out


def bench_engine(quick: bool) -> dict[str, Any]:
    """The GPU Job through gpuguard's engine (validation only, as /validate), without and with 5 rules.

    Compiling happens in ``parse_config_text``, outside the timed calls, as at config load.
    """
    from gpuguard.webhook.config import parse_config_text
    from gpuguard.webhook.decision import RequestContext
    from gpuguard.webhook.engine.core import Engine

    review = orjson.loads(BODY.read_bytes())
    obj = review["request"]["object"]
    rules = "".join(
        f"  - id: {name}\n    scope: {scope}\n    validations:\n      - expression: {orjson.dumps(expr).decode()}\n"
        for name, scope, expr in RULES)
    base = "apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
    ctx = RequestContext(operation="CREATE", namespace="ml-team", mutate=False, validate=True)
    # The collector as `gpuguard serve` sets it up (webhook/server/command.py): long-lived objects frozen,
    # gen-0 threshold 10,000, so the figures are the ones the webhook sees.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)
    out: dict[str, Any] = {}
    for label, text in (("builtin-only", base), ("builtin+5-custom", base + "customPolicies:\n" + rules)):
        engine = Engine(parse_config_text(text, "<bench>"))
        decision = engine.evaluate(obj, ctx, plain_json=True)
        assert decision.allowed and not decision.violations, decision.violations
        out[label] = _time(lambda e=engine: e.evaluate(obj, ctx, plain_json=True), quick)
    out["custom_rules_cost_us"] = round(out["builtin+5-custom"]["best_us"] - out["builtin-only"]["best_us"], 1)
    out["custom_rules_cpu_us"] = round(out["builtin+5-custom"]["cpu_best_us"] - out["builtin-only"]["cpu_best_us"], 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--wait-quiet", type=float, default=120, metavar="S",
                        help="wait up to S seconds for other work to leave the CPUs idle (default 120)")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    busy = wait_quiet(args.wait_quiet)
    obj = orjson.loads(BODY.read_bytes())["request"]["object"]
    rows = [bench_library(name, obj, args.quick) for name in LIBRARIES]
    print(f"{'library':28} {'version':8} {'compile/rule':>13} {'5 rules best':>13} {'median':>9} {'cpu':>9}"
          "  correct")
    for row in rows:
        if "eval_5_rules" not in row:
            print(f"{row['library']:28} {row.get('version', '-'):8} {row.get('error', 'not installed')}")
            continue
        ev = row["eval_5_rules"]
        print(f"{row['library']:28} {row['version']:8} {row['compile_us_per_rule']:>10} us "
              f"{ev['best_us']:>10} us {ev['median_us']:>6} us {ev['cpu_best_us']:>6} us  {row['correct']}")
    engine = bench_engine(args.quick)
    print("\nGPU Job through the engine (/validate, plain JSON):")
    for label in ("builtin-only", "builtin+5-custom"):
        print(f"  {label:18} best {engine[label]['best_us']:>7} us  median {engine[label]['median_us']:>7} us"
              f"  cpu {engine[label]['cpu_best_us']:>7} us")
    print(f"  5 custom rules cost {engine['custom_rules_cost_us']} us (wall, best), "
          f"{engine['custom_rules_cpu_us']} us (cpu)")
    warning = quiet_warning(busy)
    if warning:
        print(warning)
    write_results("cel", {"machine": machine(), "cpu_busy_before": busy, "libraries": rows, "engine": engine,
                          "quick": args.quick})
    return 0


if __name__ == "__main__":
    sys.exit(main())
