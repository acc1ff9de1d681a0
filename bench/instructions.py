"""Instructions per GPU Job create (mutate + validate), this checkout against another one.

``python bench/instructions.py [--base DIR] [--runs 300 | --quick]``.  Wall-clock timings on a shared
2-core machine swing by 2x with the neighbours' load; the number of instructions executed
does not.  Each checkout is run twice under valgrind's callgrind (``valgrind`` from Debian):
with 0 and with ``--runs`` creates after the same warm-up, so start-up cancels out and the
difference per create is the engine's own work.  The ratio of the two checkouts, times a
quiet wall-clock measurement of either (``bench/engine.py``), estimates the other's time.
Never asserts anything; prints the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from _paths import add_option, check_paths

ROOT = Path(__file__).resolve().parent.parent
BODY = "bench/bodies/gpu-job-pvc.mutate.json"
WORKLOAD = """
import sys, orjson
root, n = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, root)
from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
obj = orjson.loads(open(root + "/{body}", "rb").read())["request"]["object"]
engine = Engine(load_config())
mutate = RequestContext(operation="CREATE", namespace="ml", mutate=True, validate=False)
validate = RequestContext(operation="CREATE", namespace="ml", mutate=False, validate=True)
mutated = engine.evaluate(obj, mutate, plain_json=True).mutated
for _ in range(200 + n):
    engine.evaluate(obj, mutate, plain_json=True)
    engine.evaluate(mutated, validate, plain_json=True)
""".replace("{body}", BODY)
# What --check-paths checks (bench/_paths.py): the body, and the modules WORKLOAD imports in its string.
NEEDS = (ROOT / BODY,)
NEEDS_MODULES = ("gpuguard.webhook.config", "gpuguard.webhook.decision", "gpuguard.webhook.engine.core")


def instructions(root: Path, creates: int) -> int:
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                          WORKLOAD, str(root), str(creates)], capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "PYTHONHASHSEED": "0"})  # same dict/set layout every run
    match = re.search(r"Collected : (\d+)", out.stderr)
    if not match:
        raise SystemExit(f"callgrind gave no count for {root}:\n{out.stderr[-2000:]}")
    return int(match.group(1))


def per_create(root: Path, runs: int) -> float:
    return (instructions(root, runs) - instructions(root, 0)) / runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout (e.g. `git archive` of main); none: this one only")
    parser.add_argument("--runs", type=int, default=300, help="creates measured (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="20 creates: a smoke run (counts less exact)")
    add_option(parser)
    args = parser.parse_args()
    if args.check_paths:
        return check_paths()
    if args.quick:
        args.runs = 20
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    this = per_create(ROOT, args.runs)
    if args.base is None:
        print(f"instructions per GPU Job create: this checkout {this:,.0f}")
        return 0
    base = per_create(args.base.resolve(), args.runs)
    print(f"instructions per GPU Job create: base {base:,.0f}, this checkout {this:,.0f}, "
          f"ratio {this / base:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
