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
from gpuguard.webhook.server.nodewatch import NodeWatch
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
