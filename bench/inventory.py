"""The node inventory's cost: engine time per GPU Job with a 5,000-node inventory vs none, and memory.

A review must not pay for the cluster's size: nodes are summarised into groups when they change
(``gpuguard.workloads.inventory``), and a review reads the groups.  This driver builds a synthetic
5,000-node cluster shaped like a large GKE one (4,000 CPU nodes in 8 machine types over 3 zones,
1,000 GPU nodes: L4, A100, H100 and TPU v5e hosts, each node with its own hostname and zone),
then measures

- microseconds per ``Engine.evaluate`` of a GPU Job (mutate + validate) with no inventory and with
  the 5,000-node one (same config, same object);
- the time to summarise the 5,000 nodes (what the server's watch does after a burst of changes);
- the memory the server keeps for it: the watch's slim node cache plus the summary (tracemalloc).

``python bench/inventory.py [--quick]``; prints a table and writes ``bench/results/inventory.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
import timeit
import tracemalloc
from pathlib import Path

from _paths import add_option, check_paths

ROOT = Path(__file__).resolve().parent

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
           "name": "trainer", "image": "ghcr.io/example/train:1", "resources": {"limits": {"nvidia.com/gpu": 8}},
           "env": [{"name": "CHECKPOINT_URI", "value": "s3://bucket/run"}]}]}}}}

CPU_TYPES = [("e2-standard-8", "7910m", "29Gi"), ("e2-standard-16", "15890m", "58Gi"),
             ("n2-standard-32", "31850m", "120Gi"), ("n2-highmem-16", "15890m", "122Gi"),
             ("c3-standard-44", "43850m", "166Gi"), ("n2d-standard-64", "63770m", "245Gi"),
             ("e2-highcpu-16", "15890m", "13Gi"), ("t2d-standard-8", "7910m", "29Gi")]
GPU_TYPES = [("g2-standard-24", "nvidia-l4", "nvidia.com/gpu", "2", "23830m", "87Gi"),
             ("a2-ultragpu-1g", "nvidia-a100-80gb", "nvidia.com/gpu", "1", "11870m", "160Gi"),
             ("a3-highgpu-8g", "nvidia-h100-80gb", "nvidia.com/gpu", "8", "207", "1830Gi")]


def cluster(n: int = 5000) -> list[dict]:
    nodes = []
    zones = ["us-central1-a", "us-central1-b", "us-central1-c"]
    for i in range(n):
        zone = zones[i % 3]
        labels = {"kubernetes.io/hostname": f"node-{i}", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "us-central1"}
        taints: list[dict] = []
        if i % 5:  # 4 of 5: CPU nodes
            itype, cpu, mem = CPU_TYPES[i % len(CPU_TYPES)]
            alloc = {"cpu": cpu, "memory": mem, "ephemeral-storage": "94Gi", "pods": "110"}
            labels.update({"cloud.google.com/gke-nodepool": f"pool-{itype}", "node.kubernetes.io/instance-type": itype})
        elif i % 25 == 0:
            labels.update({"cloud.google.com/gke-nodepool": "tpu-pool", "node.kubernetes.io/instance-type":
                           "ct5lp-hightpu-4t", "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                           "cloud.google.com/gke-tpu-topology": "2x4"})
            alloc = {"cpu": "111", "memory": "185Gi", "ephemeral-storage": "90Gi", "google.com/tpu": "4"}
            taints = [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
        else:
            itype, product, res, count, cpu, mem = GPU_TYPES[(i // 5) % len(GPU_TYPES)]
            labels.update({"cloud.google.com/gke-nodepool": f"pool-{product}", "node.kubernetes.io/instance-type":
                           itype, "cloud.google.com/gke-accelerator": product,
                           "cloud.google.com/gke-gpu-driver-version": "default"})
            alloc = {"cpu": cpu, "memory": mem, "ephemeral-storage": "350Gi", "pods": "110", res: count}
            taints = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"node-{i}", "labels": labels,
                      "annotations": {"node.alpha.kubernetes.io/ttl": "0", "x" * 40: "y" * 400}},
                      "spec": {"taints": taints, "podCIDR": f"10.{i // 256}.{i % 256}.0/24"},
                      "status": {"allocatable": alloc, "capacity": alloc,
                                 "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                                 "message": "kubelet is posting ready status"}] * 5,
                                 "images": [{"names": [f"registry/img-{k}:1"], "sizeBytes": 1 << 28}
                                            for k in range(20)]}})
    return nodes


def per_call_us(fn, repeat: int, number: int) -> float:
    return min(timeit.repeat(fn, repeat=repeat, number=number)) / number * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and 500 nodes (a smoke run)")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.decision import RequestContext
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.server.nodewatch import _slim
    from gpuguard.workloads.inventory import from_objects

    size = 500 if args.quick else 5000
    repeat, number = (3, 50) if args.quick else (7, 400)
    nodes = cluster(size)
    config = load_config(None)
    ctx = RequestContext(namespace="ml", username="alice", groups=("system:authenticated",))

    none = Engine(config)
    with_nodes = Engine(config)
    start = time.perf_counter()
    inventory = from_objects([_slim(n) for n in nodes])
    summarise_ms = (time.perf_counter() - start) * 1e3
    summarise = [(time.perf_counter(), from_objects([_slim(n) for n in nodes]), time.perf_counter())
                 for _ in range(1 if args.quick else 3)]
    summarise_ms = min([summarise_ms] + [(b - a) * 1e3 for a, _, b in summarise])
    # What the server holds while it serves: the slim cache and the summary, not the Node objects.
    cache = {n["metadata"]["name"]: _slim(n) for n in nodes}
    del nodes, summarise
    gc.collect()
    gc.set_threshold(10_000, 20, 50)  # as the server runs (webhook/server/app.py, _tune_gc)
    with_nodes.set_nodes(inventory)
    decision = with_nodes.evaluate(JOB, ctx)
    assert not decision.error and decision.allowed, decision.violations

    us_none = per_call_us(lambda: none.evaluate(JOB, ctx), repeat, number)
    us_nodes = per_call_us(lambda: with_nodes.evaluate(JOB, ctx), repeat, number)
    assert cache

    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    cache = {name: _slim(node) for name, node in cache.items()}
    summary = from_objects(list(cache.values()))
    after = tracemalloc.take_snapshot()
    kept = sum(s.size_diff for s in after.compare_to(before, "filename"))
    tracemalloc.stop()
    assert summary.groups

    result = {"machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
              "nodes": size, "groups": len(summary.groups), "us_per_job_no_inventory": round(us_none, 1),
              "us_per_job_with_inventory": round(us_nodes, 1),
              "overhead_percent": round((us_nodes / us_none - 1) * 100, 1),
              "summarise_ms": round(summarise_ms, 1), "kept_mib": round(kept / 2**20, 2),
              "sized_from": decision.mutated["metadata"]["annotations"].get("gpuguard.io/sized-from")}
    rows = [("nodes (groups)", f"{size} ({len(summary.groups)})"),
            ("engine, GPU Job, no inventory", f"{us_none:.0f} us"),
            (f"engine, GPU Job, {size}-node inventory", f"{us_nodes:.0f} us ({result['overhead_percent']:+.1f}%)"),
            (f"summarise {size} nodes (per node change burst)", f"{summarise_ms:.0f} ms"),
            ("memory kept (slim node cache + summary)", f"{result['kept_mib']} MiB")]
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if not args.quick:
        out = ROOT / "results" / "inventory.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out.relative_to(ROOT.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
