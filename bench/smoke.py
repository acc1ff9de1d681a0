"""The benchmarks' smoke run: each in-process driver's ``--quick`` mode, so none rots unnoticed.

``python bench/smoke.py`` (``scripts/test.sh`` runs it).  It fails when a driver breaks or a
body is denied (``bench/bodies.py`` checks each against the engine; ``bench/hostile.py`` checks
each input's answer; ``bench/audit_scale.py`` parses each audit report format), never on speed:
the figures are printed, not judged.  Results go to a temporary directory
(``GPUGUARD_BENCH_RESULTS``), so the recorded runs in ``bench/results`` stay as they are;
``bench/report.py --check`` then checks that every README table has a recorded run with its
commit to be regenerated from.  The drivers that need tools from ``bench/setup.sh`` (``wrk``,
``valgrind``, the e2e control plane) or the ``bench-cel`` extras run in full only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = (["engine.py", "--quick"], ["hostile.py", "--quick"], ["audit_scale.py", "--quick"], ["report.py", "--check"])


def main() -> int:
    failed = []
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-smoke-") as results:
        env = {**os.environ, "GPUGUARD_BENCH_RESULTS": results}
        for argv in RUNS:
            started = time.monotonic()
            proc = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], cwd=HERE.parent, env=env,
                                  capture_output=True, text=True, timeout=300, check=False)
            took = time.monotonic() - started
            print(f"bench smoke: {' '.join(argv):24} exit {proc.returncode} in {took:.1f} s")
            if proc.returncode != 0:
                failed.append(argv[0])
                print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n", file=sys.stderr)
    if failed:
        print(f"bench smoke: FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
