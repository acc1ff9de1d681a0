"""The webhook's cached watch of Nodes: the node inventory every engine of the process decides with.

``gpuguard serve --node-inventory`` starts one per process.  The shared list+watch
(``gpuguard.kubeapi.watch.ResourceWatch``) lists the Nodes in pages of raw JSON, then watches with bookmarks from the
list's resourceVersion, and lists again only after a 410 (capped back-off on errors).  Each node is slimmed as it
arrives to what the inventory reads (labels, taints, allocatable, whether it is cordoned), so memory follows the
number of nodes times a few hundred bytes, never a whole list of the client's model objects (the list it replaced
decoded every node in one call: 193 MiB at 1,000 nodes, 582 MiB at 5,000).  When nodes change it summarises them
into groups
(``gpuguard.workloads.inventory``) at most every ``settle_seconds`` and hands the result to
``on_change``: reviews never wait for it and never summarise anything, whatever the cluster's size.

Autoscaled clusters: GPU nodes a Karpenter ``NodePool`` would make don't exist until a pod needs
them, so the pools are part of the inventory too.  Another daemon thread lists
``karpenter.sh/v1`` NodePools every ``pool_refresh`` seconds (a few objects, so a list rather than
a watch); where that API is not served (404) there are none, and it looks again later, so a
Karpenter installed after gpuguard is found.

DRA DeviceClasses (``resource.k8s.io``, the newest served version) are listed by the same thread at the same
interval: a few cluster-scoped objects, which say what else counts as an accelerator (a class no profile names;
an extended resource a class serves, ``spec.extendedResourceName``; docs/accelerators.md).
Once a version of that API answers, the DRA drivers' ResourceSlices are followed by a list+watch like the
nodes' (paginated, each slice reduced to its node, driver and device count as it arrives): a node whose GPUs a DRA
driver publishes, with no ``nvidia.com/gpu`` allocatable, counts the devices as the extended resource its driver's
DeviceClass maps them to (KEP-5004; docs/inventory.md).  Where no version is served, no slice watch runs: the
cluster is asked again at the next DeviceClass read.
RBAC: ``list`` and ``watch`` on nodes and resourceslices, ``list`` on nodepools and deviceclasses
(``deploy/base/rbac.yaml``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuguard.kubeapi.client import ApiError, custom_objects
from gpuguard.kubeapi.watch import SERVER_PAGE_SIZE, ResourceWatch
from gpuguard.workloads.claims import GROUP as DRA_GROUP
from gpuguard.workloads.claims import VERSIONS as DRA_VERSIONS
from gpuguard.workloads.inventory import EMPTY_INVENTORY, Inventory, SliceEntry, from_objects, slice_entry

log = logging.getLogger("gpuguard.nodes")
KARPENTER = ("karpenter.sh", "v1", "nodepools")


def _slim_pool(pool: dict) -> dict:
    """What the inventory reads of a NodePool: its name and spec (template labels, requirements, taints, limits)."""
    return {"apiVersion": f"{KARPENTER[0]}/{KARPENTER[1]}", "kind": "NodePool",
            "metadata": {"name": (pool.get("metadata") or {}).get("name")}, "spec": pool.get("spec") or {}}


def _slim(node: dict) -> dict:
    """The parts of a Node the inventory reads (a node object is ~10 KB; this is a few hundred bytes)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {})},
            "spec": {"taints": list(spec.get("taints") or []), "unschedulable": bool(spec.get("unschedulable"))},
            "status": {"allocatable": dict(status.get("allocatable") or {})}}


def _slim_class(device_class: dict, version: str) -> dict:
    """What the accelerator model reads of a DeviceClass: its name, the extended resource it serves and its CEL
    selectors (which name the driver whose ResourceSlices it draws devices from)."""
    spec = device_class.get("spec") or {}
    slim_spec: dict[str, Any] = {"extendedResourceName": spec["extendedResourceName"]} \
        if spec.get("extendedResourceName") else {}
    selectors = [{"cel": {"expression": str(((s.get("cel") or {}).get("expression")) or "")}}
                 for s in spec.get("selectors") or [] if isinstance(s, dict) and isinstance(s.get("cel"), dict)]
    if selectors:
        slim_spec["selectors"] = selectors
    return {"apiVersion": f"{DRA_GROUP}/{version}", "kind": "DeviceClass",
            "metadata": {"name": (device_class.get("metadata") or {}).get("name")}, "spec": slim_spec}


def _forget_unlisted(store: dict[str, Any], seen: set[tuple[str, str]]) -> None:
    """Drop from a cluster-scoped store (by name) what a complete list no longer holds: deleted while unwatched."""
    names = {name for _, name in seen}
    for name in [n for n in store if n not in names]:
        store.pop(name, None)


class NodeWatch:
    """A cached list+watch of Nodes, summarised into an inventory when they change."""

    def __init__(self, api_client: Any, on_change: Callable[[Inventory], None], settle_seconds: float = 0.5,
                 pool_refresh: float = 30.0):
        self._api_client = api_client
        self._pool_refresh = pool_refresh
        self._pools: dict[str, dict] = {}
        self._classes: dict[str, dict] = {}  # DRA DeviceClasses, slimmed
        self._slices: dict[str, SliceEntry] = {}  # ResourceSlice name -> its devices per node (bounded per slice)
        self._slice_watch: ResourceWatch | None = None
        self._slice_version: str | None = None
        self._slices_synced = False
        self._dra_read = False  # the DeviceClasses were asked for once (served or not)
        self._on_change = on_change
        self._settle = settle_seconds
        self._nodes: dict[str, dict] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self.synced = False
        self.inventory: Inventory = EMPTY_INVENTORY
        self._watch = ResourceWatch(api_client, "/api/v1/nodes", self._node_event, self._nodes_listed, name="nodes",
                                    page_size=SERVER_PAGE_SIZE)

    @property
    def error(self) -> str | None:
        """Why the node (or ResourceSlice) list or watch is failing now (``None`` while they work)."""
        return self._watch.error or (self._slice_watch.error if self._slice_watch is not None else None)

    @property
    def complete(self) -> bool:
        """The nodes are listed, the DRA API was asked for, and its ResourceSlices listed where it is served:
        the first inventory worth deciding with."""
        return self.synced and self._dra_read and (self._slice_watch is None or self._slices_synced)

    def start(self) -> NodeWatch:
        self._watch.start()
        for target, name in ((self._summarise_loop, "gpuguard-inventory"), (self._poll_pools, "gpuguard-nodepools")):
            threading.Thread(target=target, daemon=True, name=name).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        if self._slice_watch is not None:
            self._slice_watch.stop()
        self._dirty.set()

    def _node_event(self, kind: str, node: dict) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        if kind == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = _slim(node)
        if self.synced:
            self._dirty.set()

    def _nodes_listed(self, seen: set[tuple[str, str]]) -> None:
        """A complete list: nodes deleted while nobody watched go; the first one makes the watch synced."""
        _forget_unlisted(self._nodes, seen)
        self.synced = True
        self._dirty.set()

    def _summarise_loop(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._stop.wait(self._settle)  # a burst of node events becomes one summary
            self._dirty.clear()
            self.summarise()

    def _watch_slices(self, version: str) -> None:
        """Follow the ResourceSlices of ``version`` (the DeviceClasses' served version), once per version."""
        if version == self._slice_version:
            return
        if self._slice_watch is not None:
            self._slice_watch.stop()
        self._slice_version, self._slices, self._slices_synced = version, {}, False
        self._slice_watch = ResourceWatch(self._api_client, f"/apis/{DRA_GROUP}/{version}/resourceslices",
                                          self._slice_event, self._slices_listed, name="resourceslices",
                                          page_size=SERVER_PAGE_SIZE).start()
        log.info("watching %s/%s ResourceSlices: DRA devices count in the node inventory", DRA_GROUP, version)

    def _slice_event(self, kind: str, obj: dict) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        obj.setdefault("kind", "ResourceSlice")
        obj.setdefault("apiVersion", f"{DRA_GROUP}/{self._slice_version}")
        entry = None if kind == "DELETED" else slice_entry(obj)
        changed = (self._slices.pop(name, None) if entry is None else self._slices.get(name)) != entry
        if entry is not None:
            self._slices[name] = entry
        if changed and self._slices_synced:
            self._dirty.set()

    def _slices_listed(self, seen: set[tuple[str, str]]) -> None:
        """A complete list of slices: those deleted while nobody watched go."""
        _forget_unlisted(self._slices, seen)
        self._slices_synced = True
        self._dirty.set()

    def summarise(self) -> Inventory:
        """Summarise the cached nodes now and hand the inventory on."""
        inventory = from_objects([*self._nodes.values(), *self._pools.values(), *self._classes.values()],
                                 slice_entries=list(self._slices.values()))
        self.inventory = inventory
        try:
            self._on_change(inventory)
        except Exception as exc:  # noqa: BLE001 - a failing consumer must not stop the watch
            log.error("applying the node inventory failed: %s: %s", type(exc).__name__, exc)
        return inventory

    def read_pools(self) -> None:
        """List the Karpenter NodePools once; mark the inventory dirty when they changed."""
        try:
            listing = custom_objects(self._api_client).list_cluster_custom_object(*KARPENTER, _request_timeout=10)
            pools = {p["metadata"]["name"]: _slim_pool(p) for p in listing.get("items") or []
                     if isinstance(p, dict) and (p.get("metadata") or {}).get("name")}
        except ApiError as exc:
            if exc.status != 404:  # 404: Karpenter's API is not served here; no pools
                log.warning("reading Karpenter NodePools failed: HTTP %s; keeping the last ones", exc.status)
                return
            pools = {}
        if pools != self._pools:
            self._pools = pools
            self._dirty.set()

    def read_device_classes(self) -> None:
        """List the DRA DeviceClasses once (the newest served version); mark the inventory dirty when they changed.
        Where ``resource.k8s.io`` is not served (404 in every version) there are none."""
        api = custom_objects(self._api_client)
        classes: dict[str, dict] = {}
        for version in DRA_VERSIONS:
            try:
                listing = api.list_cluster_custom_object(DRA_GROUP, version, "deviceclasses", _request_timeout=10)
            except ApiError as exc:
                if exc.status == 404:
                    continue  # not served in this version: try an older one
                log.warning("reading DeviceClasses failed: HTTP %s; keeping the last ones", exc.status)
                return
            classes = {c["metadata"]["name"]: _slim_class(c, version) for c in listing.get("items") or []
                       if isinstance(c, dict) and (c.get("metadata") or {}).get("name")}
            self._watch_slices(version)
            break
        if classes != self._classes:
            self._classes = classes
            self._dirty.set()

    def _poll_pools(self) -> None:
        while not self._stop.is_set():
            for read, what in ((self.read_pools, "Karpenter NodePools"), (self.read_device_classes, "DeviceClasses")):
                try:
                    read()
                except Exception as exc:  # noqa: BLE001 - network errors: keep the last ones, try again
                    log.warning("reading %s failed (%s); keeping the last ones", what, type(exc).__name__)
            self._dra_read = True  # asked once, answered or not: the first inventory waits no longer for it
            self._stop.wait(self._pool_refresh)


def start_node_watch(api_client: Any, on_change: Callable[[Inventory], None],
                     wait_seconds: float = 10.0, pool_refresh: float = 30.0) -> NodeWatch:
    """Start the process's node watch and wait (bounded) for its first listing to be summarised."""
    watch = NodeWatch(api_client, on_change, pool_refresh=pool_refresh).start()
    deadline = time.monotonic() + wait_seconds
    while not watch.complete and time.monotonic() < deadline:
        time.sleep(0.05)
    if watch.synced:
        watch.summarise()
    return watch
