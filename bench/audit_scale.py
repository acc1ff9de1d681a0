"""``gpuguard audit`` at scale: wall time, CPU time and peak RSS for N generated manifests, per format.

``python bench/audit_scale.py [--count 100000] [--formats table,json,...]``.  The corpus is the
mix of ``bench/peers/corpus.py`` (Deployments, Jobs, Pods, CronJobs, StatefulSets, PyTorchJobs,
Services and ConfigMaps; about half request GPUs and some of those break a policy), written

* as ``--count`` one-object files in folders of 1,000 (a platform repository), and
* as one multi-document YAML file of as many of the same objects as fit in ``--big-mib`` (a
  ``helm template`` or ``kubectl get -o yaml`` dump; the manifest reader refuses files over 64 MiB).

Each (input, format) pair runs ``gpuguard audit`` once as a subprocess, report to a file; ``wait4``
gives the child's CPU time and peak RSS (``ru_maxrss``).  The audit's memory should not grow with
the number of manifests: compare the peak RSS of ``--count 10000`` and ``--count 100000``.
``--pythonpath DIR`` measures another checkout (a folder holding ``gpuguard/`` as installed, e.g.
symlinks to an exported commit's webhook/, policies/, workloads/, certs/, kubeapi/).  ``--quick``
(300 manifests, every format, outputs parsed and checked) is the smoke run of ``bench/smoke.py``.
Writes ``bench/results/audit-scale.json``; never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import yaml
from _common import ROOT, machine, machine_line, table, wait_quiet, write_results
from _paths import add_option, check_paths
from peers import corpus

FORMATS = ("table", "json", "sarif", "junit", "policyreport", "html")
PER_FOLDER = 1000
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def generate(work: Path, count: int, big_mib: float, seed: int = 22) -> tuple[Path, Path, int]:
    """(folder of ``count`` files, one multi-document file, objects in that file)."""
    rng = random.Random(seed)
    kinds = list(corpus.MIX)
    weights = [corpus.MIX[k] for k in kinds]
    folder, big = work / "manifests", work / "all.yaml"
    budget = int(big_mib * 1024 * 1024)
    size = in_big = 0
    with big.open("w", encoding="utf-8") as stream:
        for i in range(count):
            kind = rng.choices(kinds, weights)[0]
            text = yaml.dump(corpus.manifest(kind, i, rng), Dumper=_DUMPER, sort_keys=False)
            sub = folder / f"{i // PER_FOLDER:04d}"
            if i % PER_FOLDER == 0:
                sub.mkdir(parents=True, exist_ok=True)
            (sub / f"{i:06d}-{kind.lower()}.yaml").write_text(text, encoding="utf-8")
            piece = "---\n" + text
            if size + len(piece) <= budget:
                stream.write(piece)
                size += len(piece)
                in_big += 1
    return folder, big, in_big


def run_audit(target: Path, fmt: str, out: Path, python: str, pythonpath: str | None) -> dict[str, Any]:
    """One ``gpuguard audit`` subprocess: wall, CPU (user + system) and peak RSS of the child."""
    env = {**os.environ, "CI": "true"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = [python, "-m", "gpuguard.webhook", "audit", str(target), "--format", fmt, "--fail-on", "never",
            "--no-progress", "--output-file", str(out)]
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    return {"wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "exit": os.waitstatus_to_exitcode(status),
            "output_mb": round(out.stat().st_size / 1e6, 1) if out.exists() else 0.0, "stderr": stderr[-2000:]}


def check_output(fmt: str, out: Path, objects: int) -> str | None:
    """Why ``out`` is not a well-formed report of ``objects`` objects, or None (the smoke run's check)."""
    text = out.read_text(encoding="utf-8")
    try:
        if fmt == "json":
            summary = orjson.loads(text)["summary"]
            if summary["objects"] != objects:
                return f"json: {summary['objects']} objects, expected {objects}"
        elif fmt == "sarif":
            orjson.loads(text)["runs"][0]["results"]
        elif fmt == "junit":
            ET.fromstring(text.encode())
        elif fmt == "policyreport":
            if not list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))):
                return "policyreport: no report"
        elif fmt == "html":
            if not text.rstrip().endswith("</html>"):
                return "html: not a whole page"
        elif fmt == "table" and "Summary" not in text:
            return "table: no summary"
    except Exception as exc:  # noqa: BLE001 - any parse failure is the finding
        return f"{fmt}: not well-formed ({type(exc).__name__}: {exc})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuguard audit on N generated manifests: time and peak RSS")
    parser.add_argument("--count", type=int, default=100_000, help="manifests (default: %(default)s)")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated (default: all)")
    parser.add_argument("--big-formats", default="table,json",
                        help="formats run on the single big file (default: %(default)s)")
    parser.add_argument("--big-mib", type=float, default=60.0,
                        help="size of the single multi-document file (default: %(default)s MiB)")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs gpuguard")
    parser.add_argument("--pythonpath", help="measure the gpuguard found here instead of the installed one")
    parser.add_argument("--name", default="audit-scale", help="results file stem (default: %(default)s)")
    parser.add_argument("--quiet-wait", type=float, default=60, metavar="SECONDS")
    parser.add_argument("--quick", action="store_true", help="300 manifests, outputs checked: a smoke run")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    if args.quick:
        args.count, args.quiet_wait, args.big_formats, args.big_mib = 300, 0, "json", 1.0
    formats = [f for f in args.formats.split(",") if f]
    big_formats = [f for f in args.big_formats.split(",") if f]
    busy = wait_quiet(args.quiet_wait)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpuguard-audit-scale-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        folder, big, in_big = generate(work, args.count, args.big_mib)
        print(f"generated {args.count} files and one {big.stat().st_size / 2**20:.1f} MiB file of {in_big} "
              f"objects in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        plan = [("files", folder, args.count, fmt) for fmt in formats]
        plan += [("one file", big, in_big, fmt) for fmt in big_formats]
        for label, target, objects, fmt in plan:
            out = work / f"report.{fmt}"
            result = run_audit(target, fmt, out, args.python, args.pythonpath)
            print(f"  {label:8} {objects:7} {fmt:12} {result['wall_s']:8.1f} s wall {result['cpu_s']:8.1f} s cpu "
                  f"{result['peak_rss_mb']:8.1f} MB peak, exit {result['exit']}", file=sys.stderr)
            if result["exit"] != 0:
                problems.append(f"{label} {fmt}: exit {result['exit']}: {result['stderr']}")
            elif args.quick and (problem := check_output(fmt, out, objects)) is not None:
                problems.append(f"{label}: {problem}")
            result.pop("stderr")
            rows.append({"input": label, "objects": objects, "format": fmt, **result,
                         "us_cpu_per_object": round(result["cpu_s"] / objects * 1e6) if objects else None})
            out.unlink(missing_ok=True)
    text = (f"{args.count:,} generated manifests (bench/peers/corpus.py mix) as one file each, and "
            f"{in_big:,} of them as one multi-document file; one run each, report to a file\n")
    text += table(["input", "objects", "format", "wall s", "CPU s", "µs CPU/object", "peak RSS MB", "report MB"],
                  [[r["input"], r["objects"], r["format"], r["wall_s"], r["cpu_s"], r["us_cpu_per_object"],
                    r["peak_rss_mb"], r["output_mb"]] for r in rows])
    if busy > 0.10:
        text += f"\n\nNOTE: {busy:.0%} of the CPUs were busy with other work before the run (shared machine)"
    print(f"\nmachine: {machine_line(machine())}\n\n{text}")
    if args.pythonpath:
        text += f"\n\ngpuguard measured from {args.pythonpath}"
    path = write_results(args.name, {"settings": {"count": args.count, "big_objects": in_big, "big_mib": args.big_mib,
                                                  "formats": formats, "big_formats": big_formats,
                                                  "pythonpath": args.pythonpath},
                                     "cpu_busy_before": busy, "runs": rows, "tables": text})
    print(f"\nresults: {path}")
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
