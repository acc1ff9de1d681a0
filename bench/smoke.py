"""The benchmarks' smoke run: every driver's paths and arguments, then each in-process driver's ``--quick`` mode.

``python bench/smoke.py`` (``scripts/test.sh`` runs it); ``--check-paths``: the first part only.

1. Every script under ``bench/`` and ``bench/peers/`` (a file with ``if __name__ == "__main__":``)
   is started with ``--check-paths`` (``START`` names the few started otherwise): it parses its
   arguments, loads its imports and checks that every file, folder and module it and the bench
   modules it imports name is there (``bench/_paths.py``), then exits without building or running
   anything -- so the drivers that need a control plane, Go or the Kyverno build (minutes) are
   held to the tree on every test run, and a rename breaks this run rather than the next
   benchmark (issue 38).  Every ``.py`` file must be checked by one of these runs, so a new
   library module cannot slip by either.
2. The in-process drivers' ``--quick`` runs (``RUNS``).  They fail when a driver breaks or a body
   is denied (``bench/bodies.py`` checks each against the engine; ``bench/hostile.py`` checks each
   input's answer; ``bench/audit_scale.py`` parses each audit report format), never on speed: the
   figures are printed, not judged.  Results go to a temporary directory
   (``GPUGUARD_BENCH_RESULTS``), so the recorded runs in ``bench/results`` stay as they are;
   ``bench/report.py --check`` then checks that every README table has a recorded run with its
   commit to be regenerated from.  The drivers that need tools from ``bench/setup.sh`` (``wrk``,
   ``valgrind``, the e2e control plane) or the ``bench-cel`` extras run in full only.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = (["engine.py", "--quick"], ["hostile.py", "--quick"], ["audit_scale.py", "--quick"], ["report.py", "--check"])
CHECK = "--check-paths"
# Scripts started otherwise than with --check-paths (None: not started).
START: dict[str, list[str] | None] = {
    "smoke.py": None,  # this run
    "_serve.py": ["serve", "--help"],  # hands its arguments to gpuguard's CLI unchanged
    "allow_app.py": ["--help"],  # names no path; --port, --cert and --key are required
}
# More argument paths worth starting: the --peers hand-over of bench/apiserver.py.
MORE_CHECKS = (["apiserver.py", "--peers", "--quick", CHECK],)
_MAIN = re.compile(r"^if __name__ == [\"']__main__[\"']:", re.M)


def scripts() -> list[str]:
    """Every benchmark script, relative to bench/: ``engine.py``, ``peers/kyverno_check.py``, ..."""
    files = sorted(HERE.glob("*.py")) + sorted(HERE.glob("peers/*.py"))
    return [p.relative_to(HERE).as_posix() for p in files if _MAIN.search(p.read_text(encoding="utf-8"))]


def modules() -> list[str]:
    """Every bench module, as ``--check-paths`` names it: ``bench/_common.py``, ``bench/peers/corpus.py``, ..."""
    files = sorted(HERE.glob("*.py")) + sorted(HERE.glob("peers/*.py"))
    return [f"bench/{p.relative_to(HERE).as_posix()}" for p in files if p.name != "__init__.py"]


def _run(argv: list[str], env: dict[str, str], failed: list[str], timeout: float) -> str:
    """Start ``bench/ARGV[0] ARGV[1:]``; its stdout.  A non-zero exit is printed and added to ``failed``."""
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, str(HERE / argv[0]), *argv[1:]], cwd=HERE.parent, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = "timeout", str(exc.stdout or ""), str(exc.stderr or "")
    print(f"bench smoke: {' '.join(argv):40} exit {code} in {time.monotonic() - started:.1f} s")
    if code != 0:
        failed.append(" ".join(argv))
        print(out[-3000:], err[-3000:], sep="\n", file=sys.stderr)
    return out


def check_paths(env: dict[str, str], failed: list[str]) -> None:
    """Part 1: every script's --check-paths (or START) run, and every module checked by one of them."""
    checked: set[str] = set()
    runs = [[name, *how] for name in scripts() if (how := START.get(name, [CHECK])) is not None]
    for argv in runs + [list(a) for a in MORE_CHECKS]:
        out = _run(argv, env, failed, timeout=120)
        checked |= set(re.findall(r"^check-paths: checked (\S+)$", out, re.M))
        if CHECK not in argv:
            checked.add(f"bench/{argv[0]}")
    checked |= {f"bench/{name}" for name, how in START.items() if how is None}
    if missed := [m for m in modules() if m not in checked]:
        failed.append("modules no --check-paths run loaded")
        print(f"bench smoke: no driver's {CHECK} run loaded {', '.join(missed)}: import it from a driver, or give "
              f"it a main with {CHECK} (bench/_paths.py)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-smoke-") as results:
        env = {**os.environ, "GPUGUARD_BENCH_RESULTS": results}
        check_paths(env, failed)
        if CHECK not in args:
            for run in RUNS:
                _run(run, env, failed, timeout=300)
    if failed:
        print(f"bench smoke: FAILED: {'; '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
