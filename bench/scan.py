"""``gpuguard scan`` over many workloads in a real kube-apiserver: first report set, API load, memory.

``python bench/scan.py [--workloads 10000] [--write-qps 100] [--steady 120]`` (needs the e2e control
plane binaries, like ``bench/apiserver.py``).  It starts etcd + kube-apiserver (no controller manager:
nothing turns Jobs into pods, so only the workloads themselves are stored), installs the PolicyReport
and PyTorchJob CRDs, creates the workloads straight through the API (no webhook registered: as a
cluster where gpuguard was installed late), then starts ``gpuguard scan`` and measures

- **time to the first full report set**: from the process start to its first full pass done (every
  workload judged, every report written), and the reports then in the cluster;
- **API requests per minute at steady state**: the scan's own request counter
  (``gpuguard_scan_api_requests``) over ``--steady`` seconds after the first pass, with ``--resync``
  (default here 60 s, a tenth of the shipped 600 s) so the window holds full resync passes;
- **writes at steady state**: reports rewritten when nothing changed (should be 0);
- **peak RSS** of the scan process (VmHWM).

The mix: 40% GPU Jobs (half without a checkpoint volume), 30% GPU Deployments, 10% PyTorchJobs with
two workers, 20% CPU Deployments (tracked, judged, no report).  Prints a table, writes
``bench/results/scan.json``.  Timings depend on the machine; they are never asserted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, cpu_busy_elsewhere, free_port, machine_line, peak_rss_mb, quiet_warning, table, write_results
from _paths import add_option, check_paths

from tests.support.processes import scrape as scrape_page  # _common put the repository on sys.path

CRDS = ROOT / "tests" / "support" / "policyreport" / "crds.yaml"
NEEDS = (CRDS,)  # what --check-paths checks (bench/_paths.py)


def _container(gpus: int, checkpoint: bool) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "ghcr.io/example/train:1",
                         "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}}
    if checkpoint:
        c["env"] = [{"name": "CHECKPOINT_URI", "value": "s3://bucket/ckpt"}]
    return c


def workload(i: int, ns: str) -> tuple[str, dict[str, Any]]:
    """(collection path, object) of workload ``i``: the mix in the module docstring."""
    name = f"w{i:05d}"
    slot = i % 10
    if slot < 4:
        pod = {"restartPolicy": "Never", "containers": [_container(1 + i % 2, checkpoint=slot < 2)]}
        return (f"/apis/batch/v1/namespaces/{ns}/jobs",
                {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
                 "spec": {"suspend": True, "template": {"spec": pod}}})
    if slot < 7 or slot >= 8:
        gpus = 1 if slot < 7 else 0
        return (f"/apis/apps/v1/namespaces/{ns}/deployments",
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                          "template": {"metadata": {"labels": {"app": name}},
                                       "spec": {"containers": [_container(gpus, checkpoint=False)]}}}})
    template = {"spec": {"containers": [_container(1, checkpoint=True)]}}
    return (f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name, "namespace": ns},
             "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                              "Worker": {"replicas": 2, "template": template}}}})


def create_all(api: Any, count: int, namespaces: int, threads: int = 8) -> float:
    from gpuguard.kubeapi.client import request

    names = [f"bench-{n:03d}" for n in range(namespaces)]
    for ns in names:
        request(api, "POST", "/api/v1/namespaces", body={"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}}).release_conn()
    started = time.monotonic()

    def create(i: int) -> None:
        path, obj = workload(i, names[i % namespaces])
        request(api, "POST", path, body=obj, timeout=60).release_conn()

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, range(count)))
    return time.monotonic() - started


def scrape(port: int) -> dict[str, float]:
    return scrape_page(f"http://127.0.0.1:{port}/metrics")


def requests_total(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("gpuguard_scan_api_requests{"))


def writes_total(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("gpuguard_scan_report_writes_total{"))


def run_scan(cp: Any, workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    log = workdir / "scan.log"
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    argv = [sys.executable, "-m", "gpuguard.webhook", "scan", "--metrics-host", "127.0.0.1", "--metrics-port",
            str(port), "--write-qps", str(args.write_qps), "--write-burst", str(int(args.write_qps)),
            "--resync", str(args.resync), "--lease-namespace", "default", "--no-node-inventory"]
    started = time.monotonic()
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        first = None
        metrics: dict[str, float] = {}
        while time.monotonic() - started < args.timeout:
            if proc.poll() is not None:
                raise SystemExit(f"gpuguard scan exited:\n{log.read_text()[-3000:]}")
            metrics = scrape(port)
            if metrics.get("gpuguard_scan_full_passes_total", 0) >= 1:
                first = time.monotonic() - started
                break
            time.sleep(0.5)
        if first is None:
            raise SystemExit(f"no full pass within {args.timeout} s:\n{log.read_text()[-3000:]}")
        at_first = {"requests": requests_total(metrics), "writes": writes_total(metrics),
                    "reports": metrics.get("gpuguard_scan_reports"),
                    "workloads": metrics.get("gpuguard_scan_workloads")}
        time.sleep(2)  # let the first pass's last metrics settle
        before, t0 = scrape(port), time.monotonic()
        time.sleep(args.steady)
        after, t1 = scrape(port), time.monotonic()
        minutes = (t1 - t0) / 60
        steady = {"seconds": round(t1 - t0, 1),
                  "requests_per_minute": round((requests_total(after) - requests_total(before)) / minutes, 1),
                  "writes": writes_total(after) - writes_total(before),
                  "full_passes": after.get("gpuguard_scan_full_passes_total", 0)
                  - before.get("gpuguard_scan_full_passes_total", 0),
                  "by_verb": {k: after[k] - before.get(k, 0) for k in after
                              if k.startswith("gpuguard_scan_api_requests{")}}
        passes = {k: v for k, v in after.items() if k.startswith("gpuguard_scan_pass_duration_seconds_")}
        return {"first_full_pass_seconds": round(first, 1), "at_first": at_first, "steady": steady,
                "peak_rss_mb": peak_rss_mb(proc.pid), "pass_duration": passes}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--write-qps", type=float, default=100.0)
    parser.add_argument("--resync", type=float, default=60.0)
    parser.add_argument("--steady", type=float, default=120.0)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--quick", action="store_true", help="500 workloads, 20 s of steady state")
    add_option(parser)
    args = parser.parse_args()
    if args.check_paths:
        raise SystemExit(check_paths())
    if args.quick:
        args.workloads, args.namespaces, args.steady, args.resync = 500, 5, 20.0, 10.0
    sys.path.insert(0, str(ROOT))
    from gpuguard.kubeapi.client import connect
    from tests.support.cluster.controlplane import ControlPlane

    busy = cpu_busy_elsewhere()
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-scan-") as tmp:
        workdir = Path(tmp)
        print("starting the control plane (etcd, kube-apiserver)...", file=sys.stderr)
        with ControlPlane(controller_manager=False, verbose=False, workdir=workdir / "cluster") as cp:
            cp.kubectl("apply", "-f", str(CRDS))
            cp.install_crds("pytorchjob")
            cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRDS), timeout=70)
            api = connect(str(cp.kubeconfig)).api
            print(f"creating {args.workloads} workloads...", file=sys.stderr)
            created = create_all(api, args.workloads, args.namespaces)
            print(f"created in {created:.1f} s; starting gpuguard scan", file=sys.stderr)
            result = run_scan(cp, workdir, args)
    result.update(workloads=args.workloads, namespaces=args.namespaces, write_qps=args.write_qps,
                  resync=args.resync, create_seconds=round(created, 1), cpu_busy_before=busy)
    first, steady = result["at_first"], result["steady"]
    print(machine_line_safe())
    print(table(["workloads", "tracked", "reports", "first full report set", "write qps", "peak RSS",
                 f"API requests/min (steady, resync {args.resync:g} s)", "writes at steady state"],
                [[args.workloads, first["workloads"], first["reports"], f"{result['first_full_pass_seconds']} s",
                  args.write_qps, f"{result['peak_rss_mb']} MB", steady["requests_per_minute"], steady["writes"]]]))
    warning = quiet_warning(busy)
    if warning:
        print(warning)
    write_results("scan" + ("-quick" if args.quick else ""), result)


def machine_line_safe() -> str:
    from _common import machine

    return machine_line(machine())


if __name__ == "__main__":
    main()
