"""The server's memory beside a large cluster: ``gpuguard serve --node-inventory --dra-claims`` at scale.

The webhook follows the cluster's Nodes, DRA ResourceSlices, ResourceClaimTemplates and ResourceClaims
(``webhook/server``'s node and claim watches, on ``gpuguard.kubeapi.watch``).  Its memory must follow what it
keeps (a slim node, a slice's device count, a claim's device requests), not what the cluster holds: issue 32
measured the list-everything-at-once watches at 582 MiB with 5,000 nodes and 632 MiB beside 250 large claim
templates, over the shipped 512 MiB limit.

This driver serves a synthetic cluster from an in-process HTTP apiserver (pages by ``limit``/``continue`` as the
real one; watches idle), starts the real ``gpuguard serve`` against it with a kubeconfig, waits until every
collection is listed, and records the server's RSS now and its peak (VmRSS, VmHWM), for an empty cluster and
for each size.  Nodes are shaped like real ones (labels, taints, allocatable, ~6 KB of images and managed fields
each); claim templates carry a 4 KB annotation beside their device request; every GPU node (one in five)
publishes two ResourceSlices (8 GPUs with the attributes a GPU driver publishes, 8 NICs of a network driver;
~3 KB each), selected by two DeviceClasses.

``python bench/watches.py [--quick]``; prints a table and writes ``bench/results/watches.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from _common import (
    gpuguard_server,
    machine,
    machine_line,
    make_certs,
    peak_rss_mb,
    rss_mb,
    table,
    write_results,
)
from _paths import add_option, check_paths

SIZES = ((0, 0), (1000, 1000), (5000, 10000))  # (nodes, claim templates); two slices per GPU node
QUICK = ((0, 0), (200, 200))


def node(i: int) -> dict[str, Any]:
    gpu = i % 5 == 0
    labels = {"kubernetes.io/hostname": f"node-{i}", "topology.kubernetes.io/zone": f"zone-{i % 3}",
              "node.kubernetes.io/instance-type": "a3-highgpu-8g" if gpu else "n2-standard-32"}
    allocatable = {"cpu": "31850m", "memory": "120Gi", "pods": "110"}
    taints = []
    if gpu:
        labels["cloud.google.com/gke-accelerator"] = "nvidia-h100-80gb"
        allocatable["nvidia.com/gpu"] = "8"
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": f"node-{i}", "labels": labels, "resourceVersion": "1",
                         "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsV1": {
                             f"f:{k}": {} for k in range(40)}}] * 3},
            "spec": {"taints": taints, "providerID": f"gce://project/zone/node-{i}"},
            "status": {"allocatable": allocatable, "capacity": allocatable,
                       "images": [{"names": [f"registry.example/team/image-{j}@sha256:{'0' * 64}"],
                                   "sizeBytes": 123456789} for j in range(25)]}}


def resource_slices(i: int) -> list[dict[str, Any]]:
    """A GPU node's slices: its 8 GPUs (the attributes a GPU DRA driver publishes) and 8 NICs of another driver."""
    if i % 5:
        return []

    def one(driver: str, prefix: str, attributes: dict[str, Any], capacity: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "ResourceSlice", "apiVersion": "resource.k8s.io/v1",
                "metadata": {"name": f"node-{i}-{driver}", "resourceVersion": "1",
                             "managedFields": [{"manager": driver, "operation": "Update"}]},
                "spec": {"driver": driver, "nodeName": f"node-{i}",
                         "pool": {"name": f"node-{i}", "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": f"{prefix}-{d}", "attributes": {
                             **attributes, "uuid": {"string": f"{prefix.upper()}-{i:05d}-{d:04d}-0000-0000"}},
                             "capacity": capacity} for d in range(8)]}}

    return [one("gpu.nvidia.com", "gpu", {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                                          "architecture": {"string": "Hopper"},
                                          "driverVersion": {"version": "570.124.6"},
                                          "cudaComputeCapability": {"version": "9.0.0"}},
                {"memory": {"value": "80Gi"}}),
            one("nic.example.net", "nic", {"linkSpeed": {"string": "400G"}, "rdma": {"bool": True}}, {})]


DEVICE_CLASSES = [{"kind": "DeviceClass", "apiVersion": "resource.k8s.io/v1", "metadata": {"name": name},
                   "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}}
                  for name in ("gpu.nvidia.com", "nic.example.net")]


def claim_template(i: int) -> dict[str, Any]:
    return {"kind": "ResourceClaimTemplate", "apiVersion": "resource.k8s.io/v1",
            "metadata": {"name": f"gpus-{i}", "namespace": f"team-{i % 50}", "resourceVersion": "1",
                         "annotations": {"example.com/notes": "n" * 4096}},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 1 + i % 8}}]}}}}


class Cluster:
    """The collections served, and how many complete lists of each were answered."""

    def __init__(self, nodes: int, templates: int) -> None:
        self.items = {"/api/v1/nodes": [node(i) for i in range(nodes)],
                      "/apis/resource.k8s.io/v1/resourceclaimtemplates": [claim_template(i) for i in range(templates)],
                      "/apis/resource.k8s.io/v1/resourceclaims": [],
                      "/apis/resource.k8s.io/v1/resourceslices": [s for i in range(nodes) for s in resource_slices(i)],
                      "/apis/resource.k8s.io/v1/deviceclasses": DEVICE_CLASSES if nodes else []}
        self.lists = {path: 0 for path in self.items}
        self.biggest_page = 0

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        if path.rstrip("/") == "/apis":  # the client asks for "/apis/"
            return 200, {"kind": "APIGroupList", "groups": [{"name": "resource.k8s.io", "versions": [
                {"groupVersion": "resource.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "resource.k8s.io/v1", "version": "v1"}}]}
        if path not in self.items:
            return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}
        if query.get("watch") in ("true", "1"):
            time.sleep(2)  # nothing changes: the watch ends empty, the server watches again
            return 200, None
        limit = int(query.get("limit") or 0) or len(self.items[path]) or 1
        start = int(query.get("continue") or 0)
        page = self.items[path][start:start + limit]
        self.biggest_page = max(self.biggest_page, len(page))
        meta: dict[str, Any] = {"resourceVersion": "10"}
        if start + limit < len(self.items[path]):
            meta["continue"] = str(start + limit)
        else:
            self.lists[path] += 1
        return 200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page}


def serve_cluster(cluster: Cluster) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            code, body = cluster.answer(url.path, {k: v[0] for k, v in parse_qs(url.query).items()})
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # gpuguard ending a watch is not an error
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def measure(workdir: Path, certs: Path, nodes: int, templates: int) -> dict[str, Any]:
    cluster = Cluster(nodes, templates)
    api = serve_cluster(cluster)
    kubeconfig = workdir / f"kubeconfig-{nodes}"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "bench",
        "clusters": [{"name": "bench", "cluster": {"server": f"http://127.0.0.1:{api.server_address[1]}"}}],
        "users": [{"name": "bench", "user": {"token": "bench"}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}]}))
    server = gpuguard_server(workdir, certs, None, cpu=None, name=f"serve-{nodes}")
    server.argv += ["--node-inventory", "--dra-claims", "--kubeconfig", str(kubeconfig)]
    server.start(timeout=120)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all(cluster.lists.values()):
            time.sleep(0.5)
        unlisted = [path for path, count in cluster.lists.items() if not count]
        if unlisted:
            raise RuntimeError(f"gpuguard serve never listed {', '.join(unlisted)} (see {server.log})")
        time.sleep(5)  # the inventory's summary and the claim store settle
        row = {"nodes": nodes, "claim_templates": templates, "listed": dict(cluster.lists),
               "resource_slices": len(cluster.items["/apis/resource.k8s.io/v1/resourceslices"]),
               "biggest_page": cluster.biggest_page, "rss_mib": rss_mb(server.pid),
               "peak_rss_mib": peak_rss_mb(server.pid)}
    finally:
        server.stop()
        api.shutdown()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small cluster only (smoke)")
    add_option(parser)
    args = parser.parse_args(argv)
    if args.check_paths:
        return check_paths()
    with tempfile.TemporaryDirectory(prefix="gpuguard-bench-watches-") as tmp:
        workdir = Path(tmp)
        certs = make_certs(workdir / "certs")
        rows = [measure(workdir, certs, n, t) for n, t in (QUICK if args.quick else SIZES)]
    info = machine()
    text = ("gpuguard serve --node-inventory --dra-claims beside a synthetic cluster (RSS after both lists, MiB)\n"
            + table(["nodes", "resource slices", "claim templates", "largest page", "RSS", "peak RSS"],
                    [[r["nodes"], r["resource_slices"], r["claim_templates"], r["biggest_page"], r["rss_mib"],
                      r["peak_rss_mib"]]
                     for r in rows]))
    print(text)
    print(machine_line(info))
    write_results("watches", {"rows": rows, "tables": text})
    return 0


if __name__ == "__main__":
    sys.exit(main())
