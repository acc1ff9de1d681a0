"""The cluster's node inventory: what nodes (and pools that can add nodes) really offer.

The accelerator profiles are a picture of one kind of cluster (GPU Operator labels, 8 CPUs and
64 Gi per GPU, 8 devices per node).  The inventory replaces that picture with the cluster's own
facts wherever it has them: which labels the nodes carrying an accelerator have, their taints,
their allocatable CPU, memory, ephemeral storage and devices, and how many there are.

Nodes are summarised into *groups* (same accelerator resources and amounts, product, instance
type and taints) when they change, never per review: a review reads a handful of groups whatever
the cluster's size.  Node pools an autoscaler grows come from two places: pools the admin
declares in the config (``inventory.nodePools``: labels, taints, allocatable, an optional
maximum count) and Karpenter ``NodePool`` objects (their requirements and taints; their shape is
unknown, so they never make a pod "too big").

A group's ``labels`` map a key to the set of values its nodes may carry (``None``: any value);
``open_labels`` says the group may carry labels not listed (a Karpenter pool adds the instance
type's well-known labels), so a selector on an unlisted key may still match it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import Learned, may_be_accelerator
from gpuguard.workloads.prices import PRODUCT_LABELS

NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# Per-node labels: never what a group (or a pod's affinity) is about.
_PER_NODE = ("kubernetes.io/hostname",)
KARPENTER_GROUP = "karpenter.sh"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def tolerated_by(self, tolerations: Iterable[Any]) -> bool:
        """The scheduler's rule: some toleration with a matching key, operator, value and effect."""
        for tol in tolerations:
            if not isinstance(tol, dict):
                continue
            effect = tol.get("effect")
            if effect and effect != self.effect:
                continue
            key, operator = tol.get("key"), tol.get("operator") or "Equal"
            if not key:
                if operator == "Exists":
                    return True
                continue
            if key != self.key:
                continue
            if operator == "Exists" or str(tol.get("value") or "") == self.value:
                return True
        return False

    def text(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True)
class NodeGroup:
    """Nodes of one shape, or a pool that can add nodes of one shape."""

    name: str
    source: str  # nodes | pool | karpenter
    labels: Mapping[str, frozenset[str] | None]
    taints: tuple[Taint, ...]
    allocatable: Mapping[str, Decimal]  # the group's largest node (what it can ever host)
    smallest: Mapping[str, Decimal]  # its smallest node (what sizing may assume everywhere)
    count: int | None  # nodes (a pool's maximum); None: no stated bound
    open_labels: bool = False
    shape_known: bool = True
    # Cordoned nodes (``spec.unschedulable``, a driver upgrade, a drain): they host nothing new now but come back,
    # so what only they can host is "not now", never "never".
    cordoned: bool = False
    # DRA devices its largest node's ResourceSlices publish, per driver (nodes only; a pool's are unknown)
    dra_devices: Mapping[str, int] = field(default_factory=dict)

    def offers(self, resource: str) -> bool:
        """Whether the group has (or, with an unknown shape, may have) ``resource``."""
        if not self.shape_known:
            return self._pool_may_offer(resource)
        return self.allocatable.get(resource, Decimal(0)) > 0

    def _pool_may_offer(self, resource: str) -> bool:
        limits = self.allocatable
        return resource in limits or not any("/" in k for k in limits)

    def amount(self, resource: str) -> Decimal | None:
        """Allocatable ``resource`` on the group's largest node; ``None``: not known."""
        if not self.shape_known or (resource in NODE_RESOURCES and resource not in self.allocatable):
            return None  # a node that does not report its disk (or CPU, memory) is not "zero"
        return self.allocatable.get(resource, Decimal(0))

    @property
    def accelerators(self) -> dict[str, Decimal]:
        """The extended resources it offers that may be accelerators (not NICs, FUSE ...: ``may_be_accelerator``)."""
        return {k: v for k, v in self.allocatable.items() if v > 0 and may_be_accelerator(k)}

    def describe(self) -> str:
        """``nvidia-h100-80gb, 4 nodes`` / ``pool gpu-l4, up to 10 nodes``."""
        if self.source == "nodes":
            nodes = "node" if self.count == 1 else "nodes"
            return f"{self.name}, {self.count} {'cordoned ' if self.cordoned else ''}{nodes}"
        bound = f"up to {self.count} nodes" if self.count is not None else "no maximum"
        return f"{'Karpenter NodePool' if self.source == 'karpenter' else 'pool'} {self.name}, {bound}"

    def untolerated(self, tolerations: Iterable[Any]) -> list[Taint]:
        tols = list(tolerations)
        return [t for t in self.taints if t.effect in ("NoSchedule", "NoExecute") and not t.tolerated_by(tols)]

    def matches(self, node_selector: Mapping[str, Any] | None, terms: list | None) -> bool:
        """Whether some node of the group may satisfy a pod's nodeSelector and required node affinity."""
        for key, value in (node_selector or {}).items():
            if not self._may_have(str(key), "In", [str(value)]):
                return False
        if terms is None:
            return True
        for term in terms:
            if not isinstance(term, dict):
                continue
            exprs = term.get("matchExpressions") or []
            if not exprs and not term.get("matchFields"):
                continue  # an empty term matches no node
            if all(isinstance(e, dict) and self._may_have(str(e.get("key")), str(e.get("operator")),
                                                           [str(v) for v in e.get("values") or []])
                   for e in exprs):
                return True
        return False

    def _may_have(self, key: str, operator: str, values: list[str]) -> bool:
        if key not in self.labels:
            if self.open_labels:
                return True
            return operator in ("NotIn", "DoesNotExist")
        possible = self.labels[key]
        if operator == "Exists":
            return True
        if operator == "DoesNotExist":
            return False
        if possible is None:
            return True
        if operator == "In":
            return bool(possible & set(values))
        if operator == "NotIn":
            return bool(possible - set(values))
        if operator in ("Gt", "Lt"):
            return True  # numeric comparisons: never a reason to refuse
        return True


@dataclass(frozen=True)
class DeviceClass:
    """A DRA DeviceClass as the accelerator model reads it: its name and the extended resource it serves, if any
    (``spec.extendedResourceName``, DRA extended resources: a container asking that name gets a device of it)."""

    name: str
    extended_resource: str | None = None
    drivers: tuple[str, ...] = ()  # the DRA drivers its selectors name (``device.driver == "gpu.nvidia.com"``)


@dataclass(frozen=True)
class Inventory:
    """The node groups and pools the engine decides with (empty: the shipped profiles are the fallback), and the
    cluster's DRA DeviceClasses (what they say is an accelerator)."""

    groups: tuple[NodeGroup, ...] = ()
    nodes: int = 0
    notes: tuple[str, ...] = field(default=())
    device_classes: tuple[DeviceClass, ...] = ()
    # selection_for answers per (resources, hints): reviews ask the same few questions again and again.
    _selections: dict[tuple, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def known(self) -> bool:
        """Whether it knows any accelerator node or pool; else the profiles' picture is the fallback."""
        known: bool = self.memo(("known",), lambda: any(g.accelerators or not g.shape_known for g in self.groups))
        return known

    @property
    def publishes_dra(self) -> bool:
        """Whether some node's ResourceSlices publish DRA devices (read from the cluster or a ``--nodes`` file)."""
        published: bool = self.memo(("dra",), lambda: any(g.dra_devices for g in self.groups))
        return published

    def offering(self, resource: str) -> list[NodeGroup]:
        return [g for g in self.groups if g.offers(resource)]

    def without(self, resource: str) -> list[NodeGroup]:
        return [g for g in self.groups if not g.offers(resource)]

    def with_groups(self, extra: Iterable[NodeGroup]) -> Inventory:
        """These groups and ``extra`` (a group already here is not added twice: joining the config's pools again
        is harmless)."""
        return Inventory(self.groups + tuple(g for g in extra if g not in self.groups), self.nodes, self.notes,
                         self.device_classes)

    def schedulable_now(self) -> Inventory:
        """The groups that can take a new pod now: without the cordoned ones (what "pends now" is judged on)."""
        now: Inventory = self.memo(("now",), lambda: Inventory(tuple(g for g in self.groups if not g.cordoned),
                                                               self.nodes, self.notes, self.device_classes))
        return now

    @property
    def has_cordoned(self) -> bool:
        return any(g.cordoned for g in self.groups)

    def with_device_classes(self, classes: Iterable[DeviceClass]) -> Inventory:
        """These groups with ``classes`` added to the DeviceClasses known (by name: the last one read wins)."""
        by_name = {c.name: c for c in (*self.device_classes, *classes)}
        return Inventory(self.groups, self.nodes, self.notes, tuple(by_name.values()))

    def learned(self, not_accelerators: Iterable[str] = (), from_nodes: bool = True) -> Learned:
        """What the nodes, pools and DeviceClasses say is an accelerator (``Accelerators.learn``): every extended
        resource a node or pool offers that may be an accelerator, with the tolerations of the NoSchedule /
        NoExecute taints whose key is that resource's name on the groups offering it; and the DeviceClasses."""
        denied = tuple(not_accelerators)
        resources: dict[str, dict[tuple, dict[str, str]]] = {}
        for group in self.groups if from_nodes else ():
            for name in group.allocatable:
                if "/" not in name or not may_be_accelerator(name, denied) or not group.offers(name):
                    continue
                tolerations = resources.setdefault(name, {})
                for taint in group.taints:
                    if taint.key == name and taint.effect in ("NoSchedule", "NoExecute"):
                        tolerations[(taint.key, taint.effect)] = {"key": name, "operator": "Exists",
                                                                  "effect": taint.effect}
        return Learned(tuple(sorted(resources)), {r: tuple(t.values()) for r, t in resources.items() if t},
                       tuple((c.name, c.extended_resource) for c in self.device_classes), denied)

    def dra_offer(self, device_class: str) -> list[tuple[NodeGroup, int]] | None:
        """Per group, the devices of ``device_class`` the largest node's ResourceSlices publish (the devices of the
        drivers its selectors name: an upper bound, as its other selectors only narrow them); ``None`` where that
        is no evidence: a class unknown or naming no driver, no slice of its drivers on any node (not read, or
        the driver not running yet), or a pool whose nodes' devices nobody can know yet."""
        found = next((c for c in self.device_classes if c.name == device_class), None)
        if found is None or not found.drivers or any(g.source != "nodes" for g in self.groups):
            return None
        offer = [(g, sum(g.dra_devices.get(d, 0) for d in found.drivers)) for g in self.groups]
        return offer if any(n for _, n in offer) else None

    def eligible(self, resources: Iterable[str]) -> list[NodeGroup]:
        """Groups and pools that offer every one of ``resources`` (extended resource names)."""
        wanted = tuple(r for r in resources if "/" in r)
        return list(self.memo(("eligible", wanted),
                              lambda: tuple(g for g in self.groups if all(g.offers(r) for r in wanted))))

    def memo(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A value derived from the summary alone, computed once per summary (reviews ask the same few
        questions again and again); bounded, so odd keys cannot grow it without limit."""
        cache = self._selections
        if key not in cache:
            if len(cache) > 1024:
                cache.clear()
            cache[key] = compute()
        return cache[key]

    def selection_for(self, resources: Iterable[str], hints: Iterable[str] = ()) -> dict[str, Any] | None:
        """The node-affinity expression true of every node and pool offering ``resources`` and of no other.

        Learned from the groups' labels: a key every eligible group carries (with its values), that no
        other group may match; keys no other group carries at all come first, then the ``hints`` (the
        profiles' own keys, product labels) in order.  ``None`` when no label tells them apart: the
        resource request alone then keeps the pod on the right nodes.
        """
        resources, hints = tuple(resources), tuple(hints)
        return self.memo(("selection", resources, hints), lambda: self._learn(resources, hints))

    def _learn(self, resources: tuple[str, ...], hints: tuple[str, ...]) -> dict[str, Any] | None:
        eligible = self.eligible(resources)
        if not eligible:
            return None
        chosen = {id(g) for g in eligible}
        others = [g for g in self.groups if id(g) not in chosen]
        rank = {key: i for i, key in enumerate(hints)}
        best: tuple | None = None
        for key in _common_keys(eligible):
            values = _union(g.labels[key] for g in eligible)
            operator, listed = ("Exists", []) if values is None else ("In", sorted(values))
            if any(g._may_have(key, operator, listed) for g in others):
                continue
            expression: dict[str, Any] = {"key": key, "operator": operator}
            if listed:
                expression["values"] = listed
            absent = all(key not in g.labels for g in others)
            order = (not absent, rank.get(key, len(rank)), not _looks_like_accelerator(key),
                     len(values or ()), key)
            if best is None or order < best[0]:
                best = (order, expression)
        return None if best is None else best[1]


def _common_keys(groups: list[NodeGroup]) -> list[str]:
    keys = set(groups[0].labels)
    for g in groups[1:]:
        keys &= set(g.labels)
    return sorted(keys)


def _union(sets: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    out: set[str] = set()
    for values in sets:
        if values is None:
            return None
        out |= values
    return frozenset(out)


def _looks_like_accelerator(key: str) -> bool:
    name = key.lower()
    return any(word in name for word in ("accelerator", "gpu", "tpu", "neuron", "gaudi"))


# ---------------------------------------------------------------- reading Node objects

def _allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, dict) else None
    out: dict[str, Decimal] = {}
    for key, raw in (alloc or {}).items() if isinstance(alloc, dict) else ():
        value = quantity.parse(raw)
        if value is not None and (key in NODE_RESOURCES or "/" in str(key)):
            out[str(key)] = value
    return out


# Taints the node controllers set for a passing condition (not ready, unreachable, memory pressure,
# not yet initialised): "busy now", never a reason a pod can't ever land there.
_CONDITION_TAINTS = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")


def _taints(raw: Any) -> tuple[Taint, ...]:
    out = []
    for t in raw if isinstance(raw, list) else ():
        if isinstance(t, dict) and isinstance(t.get("key"), str) and t.get("effect") \
                and not t["key"].startswith(_CONDITION_TAINTS):
            out.append(Taint(t["key"], str(t.get("value") or ""), str(t["effect"])))
    return tuple(sorted(out, key=lambda t: (t.key, t.value, t.effect)))


def _first(labels: Mapping[str, str], keys: Iterable[str]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


@dataclass
class _Acc:
    """A group being summarised."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    largest: dict[str, Decimal]
    smallest: dict[str, Decimal]
    count: int = 1
    cordoned: bool = False
    dra: dict[str, int] = field(default_factory=dict)

    def add(self, labels: Mapping[str, str], alloc: Mapping[str, Decimal]) -> None:
        self.count += 1
        for key in [k for k, v in self.labels.items() if labels.get(k) != v]:
            del self.labels[key]  # the labels every node of the group carries
        for key in set(self.largest) | set(alloc):
            value = alloc.get(key, Decimal(0))
            self.largest[key] = max(self.largest.get(key, Decimal(0)), value)
            self.smallest[key] = min(self.smallest.get(key, value), value)

    def freeze(self) -> NodeGroup:
        labels: dict[str, frozenset[str] | None] = {k: frozenset((v,)) for k, v in self.labels.items()}
        return NodeGroup(self.name, "nodes", labels, self.taints, dict(self.largest), dict(self.smallest),
                         self.count, cordoned=self.cordoned, dra_devices=dict(self.dra))


def summarise_nodes(nodes: Iterable[Mapping[str, Any]],
                    dra: Mapping[str, Mapping[str, int]] | None = None) -> tuple[list[NodeGroup], int]:
    """Node objects -> groups (same accelerators, DRA devices per driver (``dra``: by node name), product, instance
    type and taints), and the node count."""
    groups: dict[tuple, _Acc] = {}
    total = 0
    for node in nodes:
        meta = node.get("metadata")
        spec = node.get("spec")
        raw_labels = meta.get("labels") if isinstance(meta, dict) else None
        labels = {str(k): str(v) for k, v in raw_labels.items() if k not in _PER_NODE} \
            if isinstance(raw_labels, dict) else {}
        cordoned = isinstance(spec, dict) and spec.get("unschedulable") is True  # hosts nothing new until uncordoned
        total += 1
        alloc = _allocatable(node)
        taints = _taints(spec.get("taints") if isinstance(spec, dict) else None)
        accel = tuple(sorted((k, v) for k, v in alloc.items() if "/" in k and v > 0))
        name = meta.get("name") if isinstance(meta, dict) else None
        devices_by_driver = dict((dra or {}).get(name) or {}) if isinstance(name, str) else {}
        product = _first(labels, PRODUCT_LABELS)
        itype = _first(labels, INSTANCE_TYPE_LABELS)
        key = (accel, tuple(sorted(devices_by_driver.items())), product, itype, taints, cordoned)
        acc = groups.get(key)
        if acc is None:
            devices = [k for k, _ in accel if may_be_accelerator(k)]
            group_name = product or itype or (devices[0] if devices else next(iter(sorted(devices_by_driver)), "cpu"))
            groups[key] = _Acc(group_name, dict(labels), taints, dict(alloc), dict(alloc), cordoned=cordoned,
                               dra=devices_by_driver)
        else:
            acc.add(labels, alloc)
    return [g.freeze() for g in groups.values()], total


# ---------------------------------------------------------------- pools

def declared_pool(name: str, labels: Mapping[str, str], taints: Iterable[Mapping[str, Any]],
                  allocatable: Mapping[str, Any], max_count: int | None) -> NodeGroup:
    """A pool from the config: an autoscaled shape that may have no node yet."""
    alloc = {str(k): v for k, v in ((k, quantity.parse(raw)) for k, raw in allocatable.items()) if v is not None}
    return NodeGroup(name, "pool", {str(k): frozenset((str(v),)) for k, v in labels.items()},
                     _taints(list(taints)), alloc, alloc, max_count)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def karpenter_pool(obj: Mapping[str, Any]) -> NodeGroup:
    """A Karpenter NodePool: its requirements and template labels (shape unknown: sizes are never refused).

    Karpenter labels every node it makes with ``karpenter.sh/nodepool``; the instance type's well-known
    labels (GPU name, count ...) are not listed, so the pool's labels are open.
    """
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    template = _mapping(spec.get("template"))
    tmeta, tspec = _mapping(template.get("metadata")), _mapping(template.get("spec"))
    name = str(meta.get("name") or "nodepool")
    labels: dict[str, frozenset[str] | None] = {"karpenter.sh/nodepool": frozenset((name,))}
    for key, value in _mapping(tmeta.get("labels")).items():
        labels[str(key)] = frozenset((str(value),))
    requirements = tspec.get("requirements")
    for req in requirements if isinstance(requirements, list) else ():
        if not isinstance(req, dict) or not isinstance(req.get("key"), str):
            continue
        op, values = req.get("operator"), [str(v) for v in req.get("values") or []]
        if op == "In" and values:
            labels[req["key"]] = frozenset(values)
        elif op in ("Exists", "NotIn", "Gt", "Lt"):
            labels[req["key"]] = None
    limits = _mapping(spec.get("limits"))
    known = {str(k): v for k, v in ((k, quantity.parse(raw)) for k, raw in limits.items()) if v is not None}
    return NodeGroup(name, "karpenter", labels, _taints(tspec.get("taints")),
                     known, known, None, open_labels=True, shape_known=False)


DRA_GROUP = "resource.k8s.io"


def device_class(obj: Any) -> DeviceClass | None:
    """A ``resource.k8s.io`` DeviceClass (any served version) as the accelerator model reads it, else ``None``."""
    if not isinstance(obj, dict) or obj.get("kind") != "DeviceClass" \
            or str(obj.get("apiVersion") or "").split("/")[0] != DRA_GROUP:
        return None
    name = _mapping(obj.get("metadata")).get("name")
    if not isinstance(name, str) or not name:
        return None
    spec = _mapping(obj.get("spec"))
    mapped = spec.get("extendedResourceName")
    raw_selectors = spec.get("selectors")
    selectors: list[Any] = raw_selectors if isinstance(raw_selectors, list) else []
    expressions = [str(_mapping(_mapping(selector).get("cel")).get("expression") or "") for selector in selectors]
    drivers = tuple(sorted({driver for expression in expressions for driver in _DRIVER.findall(expression)}))
    return DeviceClass(name, mapped if isinstance(mapped, str) and "/" in mapped else None, drivers)


_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


def slice_entry(obj: Mapping[str, Any]) -> tuple[str, str, int] | None:
    """The node, driver and device count of a ``resource.k8s.io`` ResourceSlice published for one node
    (``spec.nodeName``); ``None`` for anything else.  Slices of devices reachable from several nodes
    (``nodeSelector``, ``allNodes``, per-device node selection) belong to no one node's count."""
    if obj.get("kind") != "ResourceSlice" or str(obj.get("apiVersion") or "").split("/")[0] != DRA_GROUP:
        return None
    spec = _mapping(obj.get("spec"))
    node, driver, devices = spec.get("nodeName"), spec.get("driver"), spec.get("devices")
    if isinstance(node, str) and node and isinstance(driver, str) and driver and isinstance(devices, list):
        return node, driver, sum(1 for d in devices if isinstance(d, dict))
    return None


def slice_devices(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Devices per node and DRA driver, from ``resource.k8s.io`` ResourceSlices (those published for one node)."""
    return count_slices(entry for obj in objects if (entry := slice_entry(obj)) is not None)


def count_slices(entries: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """Devices per node and driver from ``slice_entry`` records (devices published in several slices add up)."""
    out: dict[str, dict[str, int]] = {}
    for node, driver, count in entries:
        per_node = out.setdefault(node, {})
        per_node[driver] = per_node.get(driver, 0) + count
    return out


def with_slice_devices(nodes: list[Mapping[str, Any]], slices: Mapping[str, Mapping[str, int]],
                       classes: Iterable[DeviceClass]) -> list[Mapping[str, Any]]:
    """``nodes`` with the devices their ResourceSlices publish counted as the extended resource a DeviceClass maps
    them to (DRA extended resources, KEP-5004): a DRA-only node advertises no ``nvidia.com/gpu`` allocatable, yet
    a pod asking ``nvidia.com/gpu`` is served by its driver's devices.  A node that advertises the resource itself
    keeps its own count."""
    resource_of = {driver: c.extended_resource for c in classes if c.extended_resource for driver in c.drivers}
    out: list[Mapping[str, Any]] = []
    for node in nodes:
        name = _mapping(node.get("metadata")).get("name")
        extra = {resource_of[driver]: count for driver, count in (slices.get(name) or {}).items()
                 if driver in resource_of and count > 0} if isinstance(name, str) else {}
        status = _mapping(node.get("status"))
        allocatable = dict(_mapping(status.get("allocatable")))
        extra = {r: n for r, n in extra.items() if not quantity.parse(allocatable.get(r) or 0)}
        if not extra:
            out.append(node)
            continue
        allocatable.update({r: str(n) for r, n in extra.items()})
        out.append({**node, "status": {**status, "allocatable": allocatable}})
    return out


def device_classes(objects: Iterable[Any]) -> list[DeviceClass]:
    """The DeviceClasses among ``objects`` (Lists unpacked)."""
    return [found for obj in _flatten(objects) if (found := device_class(obj)) is not None]


def from_objects(objects: Iterable[Any], pools: Iterable[NodeGroup] = (),
                 slice_counts: Mapping[str, Mapping[str, int]] | None = None) -> Inventory:
    """An inventory from Node, Karpenter NodePool, DRA DeviceClass and ResourceSlice objects (Lists unpacked) plus
    declared pools; a node's ResourceSlices count as the extended resource a DeviceClass maps their driver to.
    ``slice_counts`` (devices per node and driver) stands for slices already reduced to their counts, as the
    server's watch keeps them."""
    nodes: list[Mapping[str, Any]] = []
    extra: list[NodeGroup] = list(pools)
    classes: list[DeviceClass] = []
    slices: list[Mapping[str, Any]] = []
    for obj in _flatten(objects):
        kind, api = obj.get("kind"), str(obj.get("apiVersion") or "")
        if kind == "Node" and api == "v1":
            nodes.append(obj)
        elif kind == "NodePool" and api.split("/")[0] == KARPENTER_GROUP:
            extra.append(karpenter_pool(obj))
        elif kind == "ResourceSlice":
            slices.append(obj)
        elif (found := device_class(obj)) is not None:
            classes.append(found)
    counts: dict[str, dict[str, int]] = {}
    if slices or slice_counts:
        counts = slice_devices(slices)
        for node, per_driver in (slice_counts or {}).items():
            mine = counts.setdefault(node, {})
            for driver, count in per_driver.items():
                mine[driver] = mine.get(driver, 0) + count
        nodes = with_slice_devices(nodes, counts, classes)
    groups, total = summarise_nodes(nodes, counts)
    return Inventory(tuple(groups) + tuple(extra), total).with_device_classes(classes)


def _flatten(objects: Iterable[Any]) -> Iterable[Mapping[str, Any]]:
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        if str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
            for item in obj["items"]:
                if isinstance(item, dict):
                    item.setdefault("kind", obj["kind"][:-4] if obj["kind"] != "List" else item.get("kind"))
                    item.setdefault("apiVersion", obj.get("apiVersion"))
                    yield item
        else:
            yield obj


EMPTY_INVENTORY = Inventory()
