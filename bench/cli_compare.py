"""The audit CLI next to ``kubectl-kyverno apply`` on the same generated corpus: wall time and peak RSS.

``python bench/cli_compare.py [--count 1000] [--runs 5]``.  A corpus of ``--count`` one-object
manifests of mixed kinds (``bench/peers/corpus.py``) is audited by

* ``gpuguard audit DIR --format json`` (the full default policy set, JSON with patches), and
* ``kubectl-kyverno apply bench/peers/kyverno/ --resource DIR`` (the translated ClusterPolicies;
  mutations are computed but not written out unless ``--kyverno-output`` is given),

alternating the two tools ``--runs`` times so that a busy machine hits both alike; each run's wall
time and peak RSS (``wait4``'s ru_maxrss of the child) are recorded and the median reported.
Output goes to /dev/null: the cost of rendering a terminal is not what is compared.  Kyverno is
built by ``bench/peers/build_kyverno.sh`` (skipped with a message when Go is missing).  Writes
``bench/results/cli-compare.json``; never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, machine_line, table, wait_quiet, write_results
from _paths import add_option, check_paths
from peers import corpus, kyverno_proc


def timed(argv: list[str], cwd: Path) -> tuple[float, float, int]:
    """Run ``argv`` with output discarded: (wall seconds, peak RSS MB, exit code)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuguard audit vs kubectl-kyverno apply on one corpus")
    parser.add_argument("--count", type=int, default=1000, help="manifests in the corpus (default: %(default)s)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each tool, alternating (default: %(default)s)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuguard")
    parser.add_argument("--kyverno-output", action="store_true",
                        help="also have Kyverno write the mutated resources (-o FILE), as gpuguard's JSON has patches")
    parser.add_argument("--quiet-wait", type=float, default=60, metavar="SECONDS")
    parser.add_argument("--quick", action="store_true", help="100 manifests, 1 run, no quiet wait: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    if args.quick:
        args.count, args.runs, args.quiet_wait = 100, 1, 0
    try:
        cli, _controller = kyverno_proc.binaries(build=True)
    except kyverno_proc.KyvernoUnavailable as exc:
        print(f"SKIP: {exc}", file=sys.stderr)
        return 0
    busy = wait_quiet(args.quiet_wait)
    results: dict[str, list[tuple[float, float, int]]] = {"gpuguard audit": [], "kubectl-kyverno apply": []}
    with tempfile.TemporaryDirectory(prefix="gpuguard-cli-compare-") as tmp:
        work = Path(tmp)
        data = work / "corpus"
        corpus.generate(data, args.count)
        commands = {
            "gpuguard audit": [args.python, "-m", "gpuguard.webhook", "audit", str(data), "--format", "json",
                               "--fail-on", "never"],
            "kubectl-kyverno apply": [str(cli), "apply", str(kyverno_proc.POLICY_DIR), "--resource", str(data),
                                      *(["-o", str(work / "mutated.yaml")] if args.kyverno_output else [])],
        }
        for run in range(args.runs):
            for name, cmd in commands.items():
                wall, rss, code = timed(cmd, ROOT)
                results[name].append((wall, rss, code))
                print(f"  run {run + 1}/{args.runs} {name:22} {wall:6.2f} s {rss:7.1f} MB exit {code}",
                      file=sys.stderr)
    med = {name: {"wall_s": statistics.median(r[0] for r in runs), "peak_rss_mb": statistics.median(r[1] for r in runs),
                  "exit_codes": sorted({r[2] for r in runs}), "runs": [[round(w, 3), round(m, 1)] for w, m, _ in runs]}
           for name, runs in results.items()}
    g, k = med["gpuguard audit"], med["kubectl-kyverno apply"]
    text = (f"{args.count} generated manifests (bench/peers/corpus.py), median of {args.runs} alternating runs, "
            "output to /dev/null\n")
    text += table(["tool", "wall s (median)", "peak RSS MB (median)", "runs (s)"],
                  [[n, m["wall_s"], m["peak_rss_mb"], ", ".join(f"{w:.2f}" for w, _ in m["runs"])]
                   for n, m in med.items()])
    text += (f"\n\ngpuguard / kyverno: wall {g['wall_s'] / k['wall_s']:.2f}x, "
             f"peak RSS {g['peak_rss_mb'] / k['peak_rss_mb']:.2f}x")
    if busy > 0.10:
        text += f"\n\nNOTE: {busy:.0%} of the CPUs were busy with other work before the run (shared machine)"
    print(f"\nmachine: {machine_line(machine())}\n\n{text}")
    path = write_results("cli-compare", {"settings": {"count": args.count, "runs": args.runs,
                                                      "kyverno_output": args.kyverno_output,
                                                      "kyverno_version": kyverno_proc.KYVERNO_VERSION},
                                         "cpu_busy_before": busy, "median": med, "tables": text})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
