"""The server's node and claim watches on the shared paginated list+watch (``gpuguard.kubeapi.watch``).

Why tested: both used to list their whole collection in one call decoded into the Kubernetes client's model
objects (issue 32: 582 MiB at 5,000 nodes; 632 MiB beside 250 claim templates, over the 512 MiB limit).  Now they
ask in pages and keep only their slim form of each object; these pin the pages asked for, what is kept, and that a
complete list drops what went away while nobody watched.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuguard.kubeapi.watch import SERVER_PAGE_SIZE
from gpuguard.webhook.server.claimwatch import ClaimWatch
from gpuguard.webhook.server.nodewatch import NodeWatch, start_node_watch
from tests.support.fake_apiserver import Call, serve

PAGE = SERVER_PAGE_SIZE  # the server watches' page size


class Paged:
    """A collection answered in pages (the continue token is the offset), every call recorded."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def __call__(self, call: Call) -> tuple[int, Any]:
        limit, start = int(call.query["limit"]), int(call.query.get("continue", "0"))
        meta: dict[str, Any] = {"resourceVersion": "7"}
        if start + limit < len(self.items):
            meta["continue"] = str(start + limit)
        return 200, {"metadata": meta, "items": copy.deepcopy(self.items[start:start + limit])}


def _node(i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"gpu-{i}", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"},
                         "annotations": {"big": "x" * 2000}, "managedFields": [{"manager": "kubelet"}] * 5},
            "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}, "images": [{"names": ["x" * 200]}] * 20}}


def test_nodes_are_listed_in_pages_and_kept_slim() -> None:
    nodes = Paged([_node(i) for i in range(2 * PAGE + 1)])
    seen: list[Any] = []
    with serve(nodes) as (server, api):
        watch = NodeWatch(api, seen.append)
        watch._watch.list()  # the watch thread's first step, run here
        assert watch.synced
        lists = [c for c in server.calls if c.path == "/api/v1/nodes"]
        assert [c.query["limit"] for c in lists] == [str(PAGE)] * 3  # two pages and one node: three pages
        assert len(watch._nodes) == 2 * PAGE + 1
        slim = watch._nodes["gpu-0"]
        assert set(slim["metadata"]) == {"name", "labels"} and "images" not in slim["status"]
        inventory = watch.summarise()
        assert seen == [inventory] and sum(g.count for g in inventory.groups) == 2 * PAGE + 1
        # nodes deleted while nobody watched leave with the next complete list
        nodes.items = nodes.items[:10]
        watch._watch.list()
        assert sorted(watch._nodes) == sorted(f"gpu-{i}" for i in range(10))


def _template(ns: str, name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "annotations": {"note": "y" * 4000}},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "count": 2}}]}}}}


def test_claims_are_listed_in_pages_and_only_their_device_requests_kept() -> None:
    templates = Paged([_template("team-a", f"t{i}") for i in range(2 * PAGE + 100)])
    claims = Paged([])

    def answer(call: Call) -> tuple[int, Any]:
        return (templates if call.path.endswith("/resourceclaimtemplates") else claims)(call)

    with serve(answer) as (server, api):
        watch = ClaimWatch(api, version="v1")
        template_watch, claim_watch = watch.make_watches("v1")  # what the watch threads run first
        template_watch.list()
        assert not watch.synced  # the claims are not listed yet
        claim_watch.list()
        assert watch.synced
        pages = [c for c in server.calls if c.path == "/apis/resource.k8s.io/v1/resourceclaimtemplates"]
        assert len(pages) == 3 and all(c.query["limit"] == str(PAGE) for c in pages)
        requests = watch.lookup("ResourceClaimTemplate", "team-a", f"t{2 * PAGE + 99}")
        assert requests is not None and [r.count for r in requests] == [2]
        assert watch.lookup("ResourceClaimTemplate", "team-a", f"t{2 * PAGE + 100}") is None
        templates.items = templates.items[:1]  # deleted while nobody watched: gone with the next complete list
        template_watch.list()
        assert watch.lookup("ResourceClaimTemplate", "team-a", "t5") is None
        assert watch.lookup("ResourceClaimTemplate", "team-a", "t0") is not None


def _groups(*names: str) -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": name, "versions": [{"groupVersion": f"{name}/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": f"{name}/v1", "version": "v1"}} for name in names]}


def test_a_cluster_without_dra_is_said_once_and_watched_when_it_gains_the_api(monkeypatch, caplog) -> None:
    """A 1.33 cluster with the API off used to log "NotFound; retrying in 60 s" for ever."""
    import logging
    import time

    from gpuguard.webhook.server import claimwatch

    monkeypatch.setattr(claimwatch, "REDISCOVER_SECONDS", 0.05)
    served = ["batch"]

    def answer(call: Call) -> tuple[int, Any]:
        if call.path.rstrip("/") == "/apis":
            return 200, _groups(*served)
        if call.query.get("watch"):
            time.sleep(0.2)  # a watch that ends with nothing new
            return 200, ""
        return Paged([])(call)

    with serve(answer) as (server, api), caplog.at_level(logging.INFO, logger="gpuguard.claims"):
        watch = ClaimWatch(api).start()
        try:
            assert watch.not_served and watch.synced  # nothing to wait for
            assert "does not serve resource.k8s.io" in watch.why_unknown()
            time.sleep(0.3)
            assert not [c for c in server.calls if c.path.startswith("/apis/resource.k8s.io")]
            said = [r for r in caplog.records if "does not serve" in r.getMessage()]
            assert len(said) == 1 and said[0].levelno == logging.INFO
            served.append("resource.k8s.io")  # the cluster is upgraded
            deadline = time.monotonic() + 30
            while not any(c.path.startswith("/apis/resource.k8s.io/v1/") for c in server.calls):
                assert time.monotonic() < deadline, "the claim API appeared but nothing watches it"
                time.sleep(0.05)
            assert not watch.not_served
        finally:
            watch.stop()


DRA_DRIVER = "gpu.example.com"  # a driver and class names gpuguard ships nothing about


def _dra_node(i: int) -> dict[str, Any]:
    """A node whose GPUs only a DRA driver publishes: no GPU in its allocatable."""
    return {"metadata": {"name": f"dra-{i}", "labels": {"topology.example.com/rack": "r1"}},
            "spec": {}, "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def _slice(node: str, part: int, devices: int) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-{DRA_DRIVER}-{part}", "managedFields": [{}] * 3},
            "spec": {"driver": DRA_DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                       "resourceSliceCount": 2},
                     "devices": [{"name": f"gpu-{part}-{d}", "attributes": {"model": {"string": "X1"}}}
                                 for d in range(devices)]}}


def _dra_cluster(slices: list[dict[str, Any]], served: bool = True) -> Any:
    import time

    nodes = Paged([_dra_node(i) for i in range(3)])
    classes = Paged([{"metadata": {"name": "gpus.example.com"}, "spec": {
        "extendedResourceName": "example.com/gpu",
        "selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]}}])

    def answer(call: Call) -> tuple[int, Any]:
        if call.query.get("watch"):
            time.sleep(0.2)  # a watch that ends with nothing new
            return 200, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}
        if call.path == "/api/v1/nodes":
            return nodes(call)
        if not served or not call.path.startswith("/apis/resource.k8s.io/v1/"):
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        if call.path.endswith("/deviceclasses"):
            return 200, {"items": copy.deepcopy(classes.items), "metadata": {}}
        return Paged(slices)(call)
    return answer


def test_a_dra_only_cluster_counts_the_devices_its_resourceslices_publish() -> None:
    """KEP-5004: GPUs a DRA driver serves appear in no node's allocatable, only in ResourceSlices; a DeviceClass
    maps the driver to the extended resource pods ask for.  The server's node watch reads the slices (in pages,
    each reduced to node, driver and count): 8 devices per node, published in two slices of 4."""
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.workloads.inventory import SliceEntry

    slices = [_slice(f"dra-{i}", part, 4) for i in range(3) for part in range(2)]
    seen: list[Any] = []
    with serve(_dra_cluster(slices)) as (server, api):
        watch = start_node_watch(api, seen.append, wait_seconds=20, pool_refresh=3600)
        try:
            assert watch.complete
            asked = [c for c in server.calls if c.path == "/apis/resource.k8s.io/v1/resourceslices"]
            assert asked and asked[0].query["limit"] == str(PAGE)
            # what is kept of a slice: its node and one count per kind of device, never the slice itself
            assert all(isinstance(e, SliceEntry) and len(e.devices) == 1 for e in watch._slices.values())
            inventory = seen[-1]
            engine = Engine(load_config())
            engine.set_nodes(inventory)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                   "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                       "limits": {"example.com/gpu": 8}}}]}}
            def denied_as_never_placed(gpus: int) -> bool:
                pod["spec"]["containers"][0]["resources"]["limits"]["example.com/gpu"] = gpus
                decision = engine.evaluate(pod)
                assert decision.gpus == gpus
                return "schedulable" in [v.policy for v in decision.denials]

            assert not denied_as_never_placed(8)
            assert denied_as_never_placed(16)  # no node's slices offer 16
            # a slice withdrawn (the driver's pool shrinks): that node has 4 left, the others still 8
            watch._slice_event("DELETED", {"metadata": {"name": "dra-0-gpu.example.com-1"}})
            engine.set_nodes(watch.summarise())
            assert not denied_as_never_placed(8)
            for name in [n for n in watch._slices if not n.startswith("dra-0-")]:
                watch._slice_event("DELETED", {"metadata": {"name": name}})
            engine.set_nodes(watch.summarise())
            assert denied_as_never_placed(8) and not denied_as_never_placed(4)
        finally:
            watch.stop()


def test_without_the_dra_api_no_slice_watch_runs_and_the_first_inventory_waits_for_nothing() -> None:
    seen: list[Any] = []
    with serve(_dra_cluster([], served=False)) as (server, api):
        watch = start_node_watch(api, seen.append, wait_seconds=20, pool_refresh=3600)
        try:
            assert watch.complete and watch._slice_watch is None and watch.error is None
            assert not [c for c in server.calls if c.path.endswith("/resourceslices")]
            assert seen and seen[-1].device_classes == ()
        finally:
            watch.stop()
