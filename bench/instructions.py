"""Instructions per create (its mutating and validating review), per body, this checkout against another one.

``python bench/instructions.py [--base DIR] [--runs 300 | --quick] [--body NAME ...]``.  Wall-clock timings on a
shared 2-core machine swing by 2x with the neighbours' load; the number of instructions executed does not.  Each
checkout is run twice per body under valgrind's callgrind (``valgrind`` from Debian): with 0 and with ``--runs``
creates after the same warm-up, so start-up cancels out and the difference per create is the engine's own work.

A create is answered the way the checkout's server answers it: where ``webhook/server/onepass.py`` exists, one
evaluation (mutate and validate) whose validating half is kept and taken by digest (what ``/validate`` does when it
receives the object ``/mutate`` returned); before it, two evaluations.  The ratio of two checkouts, times a quiet
wall-clock measurement of either (``bench/engine.py``), estimates the other's time.  Never asserts anything; prints
the figures (``--json FILE`` writes them too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _paths import add_option, check_paths

ROOT = Path(__file__).resolve().parent.parent
BODIES = ("gpu-job-pvc", "gpu-pod", "pytorchjob-4w", "jobset-2x4", "argo-dag", "cpu-deployment")
WORKLOAD = """
import sys, orjson
root, shim, body, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path.insert(0, shim)  # its gpuguard is this checkout, ahead of the editable install's finder
import gpuguard
assert gpuguard.__path__[0].startswith(shim), gpuguard.__path__
from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
obj = orjson.loads(open(root + "/bench/bodies/" + body + ".mutate.json", "rb").read())["request"]["object"]
engine = Engine(load_config())
mutate = RequestContext(operation="CREATE", namespace="ml", mutate=True, validate=False)
validate = RequestContext(operation="CREATE", namespace="ml", mutate=False, validate=True)
try:
    from gpuguard.webhook.engine import onepass
    from gpuguard.webhook.server.onepass import ValidationCache
except ImportError:  # a checkout from before one evaluation per create
    onepass = None
if onepass is None:
    mutated = engine.evaluate(obj, mutate, plain_json=True).mutated
    def create():
        engine.evaluate(obj, mutate, plain_json=True)
        engine.evaluate(mutated, validate, plain_json=True)
else:
    both_ctx = RequestContext(operation="CREATE", namespace="ml", mutate=True, validate=True)
    cache, judge = ValidationCache(), (engine,)
    def create():
        both = engine.evaluate(obj, both_ctx, plain_json=True)
        if onepass.can_split(both):
            cache.keep(mutate, both.mutated, judge, onepass.validating_half(both))
            onepass.mutating_half(both)
            if cache.take(validate, both.mutated, judge) is None:
                raise SystemExit("the validating review missed what the mutating one kept")
        else:
            onepass.mutating_half(both)
            engine.evaluate(both.mutated, validate, plain_json=True)
for _ in range(200 + n):
    create()
"""
APP_WORKLOAD = """
import base64, logging, sys, orjson
root, shim, body, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sys.path[:0] = [shim, root]  # gpuguard is this checkout; so is tests.support
from tests.support.asgi_client import AsgiClient, make_app
from gpuguard.webhook.server import logs
logs.configure("info")
for handler in logging.getLogger("gpuguard").handlers:
    handler.stream = open("/dev/null", "w")  # the log line is formatted and written, to nowhere
client = AsgiClient(make_app())
mutate_body = open(root + "/bench/bodies/" + body + ".mutate.json", "rb").read()
review = orjson.loads(mutate_body)
_, _, out = client.request("POST", "/mutate", mutate_body, {"content-type": "application/json"})
answer = orjson.loads(out)["response"]
obj = review["request"]["object"]
if "patch" in answer:
    import jsonpatch
    obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(answer["patch"])))
review["request"]["object"] = obj
validate_body = orjson.dumps(review)
headers = {"content-type": "application/json"}
for _ in range(200 + n):
    client.request("POST", "/mutate", mutate_body, headers)
    client.request("POST", "/validate", validate_body, headers)
"""
# What --check-paths checks (bench/_paths.py): the bodies, and the modules WORKLOAD imports in its string.
NEEDS = (*(ROOT / "bench" / "bodies" / f"{b}.mutate.json" for b in BODIES),
         ROOT / "tests" / "support" / "asgi_client.py")  # APP_WORKLOAD's client (the checkout's tests/ on its path)
NEEDS_MODULES = ("gpuguard.webhook.server.logs", "gpuguard.webhook.config",
                 "gpuguard.webhook.decision", "gpuguard.webhook.engine.core",
                 "gpuguard.webhook.engine.onepass", "gpuguard.webhook.server.onepass")


def instructions(root: Path, body: str, creates: int, app: bool = False) -> int:
    with tempfile.TemporaryDirectory() as shim:
        (Path(shim) / "gpuguard").symlink_to(root.resolve())  # the package is the checkout's root folder
        out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
                              "-c", APP_WORKLOAD if app else WORKLOAD, str(root), shim, body, str(creates)],
                             capture_output=True, text=True, timeout=1800,
                             env={**os.environ, "PYTHONHASHSEED": "0"})  # the same dict/set layout every run
    match = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or not match:
        raise SystemExit(f"callgrind gave no count for {root} ({body}):\n{out.stderr[-2000:]}")
    return int(match.group(1))


def per_create(root: Path, body: str, runs: int, app: bool = False) -> float:
    return (instructions(root, body, runs, app) - instructions(root, body, 0, app)) / runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout (e.g. `git archive` of main); none: this one only")
    parser.add_argument("--runs", type=int, default=300, help="creates measured (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="20 creates: a smoke run (counts less exact)")
    parser.add_argument("--body", action="append", choices=BODIES, help="only these bodies (default: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--app", action="store_true",
                        help="both reviews through the server's ASGI app (envelope, fair queue, engine thread, log "
                             "line, metrics), each its own uid as from an apiserver, not the engine alone")
    add_option(parser)
    args = parser.parse_args()
    if args.check_paths:
        return check_paths()
    if args.quick:
        args.runs = 20
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    figures = {}
    for body in args.body or BODIES:
        this = per_create(ROOT, body, args.runs, args.app)
        row = {"this": round(this)}
        if args.base is None:
            print(f"instructions per create, {body}: this checkout {this:,.0f}", flush=True)
        else:
            base = per_create(args.base.resolve(), body, args.runs, args.app)
            row.update(base=round(base), ratio=round(this / base, 3))
            print(f"instructions per create, {body}: base {base:,.0f}, this checkout {this:,.0f}, "
                  f"ratio {this / base:.3f}", flush=True)
        figures[body] = row
    if args.json:
        args.json.write_text(json.dumps({"runs": args.runs, "through": "app" if args.app else "engine",
                                         "per_create": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
