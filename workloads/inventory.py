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

# (driver, ``type`` attribute, ``productName`` attribute) of DRA devices a node publishes: devices alike to a
# DeviceClass selector gpuguard reads.
DeviceKey = tuple[str, str | None, str | None]
# The device attributes gpuguard keeps per device (every other attribute, a UUID say, would make each device its
# own kind): what the vendors' DeviceClasses select whole devices and partitions by, and the product.
DEVICE_FACTS = ("type", "productName")


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
    # DRA devices its largest node's ResourceSlices publish, per (driver, type, product) (nodes only; a pool's are
    # unknown), and the smallest memory such a device publishes (``capacity.memory``), where any does
    dra_devices: Mapping[DeviceKey, int] = field(default_factory=dict)
    dra_memory: Mapping[DeviceKey, Decimal] = field(default_factory=dict)

    def dra_count(self, device_class: DeviceClass) -> int:
        """The devices of ``device_class`` its largest node publishes (an upper bound: ``DeviceClass.selects``)."""
        return device_class.count(self.dra_devices, self.dra_memory)

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
    # Device attributes its selectors require, where gpuguard reads them exactly (``DEVICE_FACTS``): NVIDIA's
    # ``gpu.nvidia.com`` class asks ``type == "gpu"`` and its ``mig.nvidia.com`` class ``type == "mig"``, both of
    # one driver, so counting by driver alone would count a node's MIG partitions as whole GPUs.
    requires: tuple[tuple[str, str], ...] = ()
    min_memory: Decimal | None = None  # ``device.capacity[...].memory.compareTo(quantity("40Gi")) >= 0``

    def requirements(self) -> str:
        """What its selectors require beside the driver, as a message names it (``type == "gpu", memory >= 80Gi``)."""
        parts = [f'{name} == "{value}"' for name, value in self.requires]
        if self.min_memory is not None:
            parts.append(f"memory >= {quantity.format_bytes(self.min_memory)}")
        return ", ".join(parts)

    def count(self, devices: Mapping[DeviceKey, int], memory: Mapping[DeviceKey, Decimal]) -> int:
        """How many of ``devices`` (counted per kind, with each kind's smallest ``memory``) it may select."""
        return sum(n for key, n in devices.items() if self.selects(key, memory.get(key)))

    def selects(self, device: DeviceKey, memory: Decimal | None) -> bool:
        """Whether a device of ``device`` (driver, type, product) with ``memory`` may be one of this class's: its
        driver named, the attributes read equal, and its memory (where published) enough.  Conditions gpuguard
        can't read only narrow further, so a count of the devices it selects is an upper bound."""
        driver, kind, product = device
        facts = {"type": kind, "productName": product}
        if driver not in self.drivers or any(facts.get(name) not in (None, value) for name, value in self.requires):
            return False
        return self.min_memory is None or memory is None or memory >= self.min_memory


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
        drivers its selectors name with the attributes they require: an upper bound, as its other selectors only
        narrow them); ``None`` where that
        is no evidence: a class unknown or naming no driver, no slice of its drivers on any node (not read, or
        the driver not running yet), or a pool whose nodes' devices nobody can know yet."""
        found = self.device_class(device_class)
        if found is None or not found.drivers or any(g.source != "nodes" for g in self.groups):
            return None
        offer = [(g, g.dra_count(found)) for g in self.groups]
        # Devices of its drivers published somewhere: the slices are read, so a class whose requirements select
        # none of them (a memory floor above every GPU's) is offered 0, which is evidence too.
        published = any(key[0] in found.drivers for g in self.groups for key in g.dra_devices)
        return offer if published else None

    def device_class(self, name: str) -> DeviceClass | None:
        return next((c for c in self.device_classes if c.name == name), None)

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
    dra: dict[DeviceKey, int] = field(default_factory=dict)
    dra_memory: dict[DeviceKey, Decimal] = field(default_factory=dict)

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
                         self.count, cordoned=self.cordoned, dra_devices=dict(self.dra),
                         dra_memory=dict(self.dra_memory))


def summarise_nodes(nodes: Iterable[Mapping[str, Any]],
                    dra: Mapping[str, NodeDevices] | None = None) -> tuple[list[NodeGroup], int]:
    """Node objects -> groups (same accelerators, DRA devices (``dra``: by node name), product, instance type and
    taints), and the node count.  A node no product label names is named by its DRA devices' ``productName``."""
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
        published = (dra or {}).get(name) if isinstance(name, str) else None
        devices_by_key = dict(published.counts) if published else {}
        product = _first(labels, PRODUCT_LABELS) or (published.product if published else None)
        itype = _first(labels, INSTANCE_TYPE_LABELS)
        key = (accel, tuple(sorted(devices_by_key.items(), key=repr)), product, itype, taints, cordoned)
        acc = groups.get(key)
        if acc is None:
            devices = [k for k, _ in accel if may_be_accelerator(k)]
            drivers = sorted({d for d, _, _ in devices_by_key})
            group_name = product or itype or (devices[0] if devices else next(iter(drivers), "cpu"))
            groups[key] = _Acc(group_name, dict(labels), taints, dict(alloc), dict(alloc), cordoned=cordoned,
                               dra=devices_by_key, dra_memory=dict(published.memory) if published else {})
        else:
            acc.add(labels, alloc)
            for device, memory in (published.memory if published else {}).items():
                acc.dra_memory[device] = min(acc.dra_memory.get(device, memory), memory)
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
    # Every selector must match, so what each requires is required; within one expression only a conjunction
    # is read (an ``||`` or a negation could let other devices in).
    # Only attributes in the domain of a driver it names are read (a driver's devices publish theirs bare or so
    # qualified); another domain's attribute is one gpuguard doesn't keep, so it only narrows.
    exact = [e for e in expressions if "||" not in e and "!" not in e]
    requires = tuple(sorted({(attr, value) for e in exact for domain, attr, value in _ATTRIBUTE_EQUALS.findall(e)
                             if attr in DEVICE_FACTS and domain in drivers}))
    floors = [m for e in exact for domain, found in _MEMORY_AT_LEAST.findall(e)
              if domain in drivers and (m := quantity.parse(found)) is not None]
    return DeviceClass(name, mapped if isinstance(mapped, str) and "/" in mapped else None, drivers, requires,
                       max(floors) if floors else None)


_DRIVER = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")
# ``device.attributes["gpu.nvidia.com"].type == "gpu"`` (the attribute's name and the value it must have)
_ATTRIBUTE_EQUALS = re.compile(r"""device\.attributes\[\s*["']([^"']+)["']\s*\]\.(\w+)\s*==\s*["']([^"']*)["']""")
# ``device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0``
_MEMORY_AT_LEAST = re.compile(r"""device\.capacity\[\s*["']([^"']+)["']\s*\]\.memory\.compareTo\(\s*quantity\(\s*"""
                              r"""["']([^"']+)["']\s*\)\s*\)\s*>=?\s*0""")


@dataclass(frozen=True)
class SliceEntry:
    """What one ResourceSlice published for one node says: its devices counted by ``DeviceKey``, each with the
    smallest memory one of them publishes (``None``: none says).  Small and comparable, so a watch keeps one per
    slice, not the slice."""

    node: str
    devices: tuple[tuple[DeviceKey, int, Decimal | None], ...]


@dataclass(frozen=True)
class NodeDevices:
    """A node's DRA devices over all its slices: counts per ``DeviceKey`` and the smallest memory of each."""

    counts: Mapping[DeviceKey, int]
    memory: Mapping[DeviceKey, Decimal]

    @property
    def product(self) -> str | None:
        """The product its devices name (``productName``), as a label value would spell it (``NVIDIA-H100-80GB-HBM3``,
        as GPU Feature Discovery writes ``nvidia.com/gpu.product``), so cost tables match either source."""
        products = sorted({p for _, _, p in self.counts if p})
        return products[0].replace(" ", "-") if products else None


def slice_entry(obj: Mapping[str, Any]) -> SliceEntry | None:
    """The devices of a ``resource.k8s.io`` ResourceSlice published for one node (``spec.nodeName``); ``None``
    for anything else.  Slices of devices reachable from several nodes (``nodeSelector``, ``allNodes``, per-device
    node selection) belong to no one node's count."""
    if obj.get("kind") != "ResourceSlice" or str(obj.get("apiVersion") or "").split("/")[0] != DRA_GROUP:
        return None
    spec = _mapping(obj.get("spec"))
    node, driver, devices = spec.get("nodeName"), spec.get("driver"), spec.get("devices")
    if not (isinstance(node, str) and node and isinstance(driver, str) and driver and isinstance(devices, list)):
        return None
    counts: dict[DeviceKey, int] = {}
    memory: dict[DeviceKey, Decimal] = {}
    for device in devices:
        if not isinstance(device, dict):
            continue
        body = _mapping(device.get("basic")) or device  # v1beta1 keeps a device's facts under ``basic``
        attributes = _mapping(body.get("attributes"))
        key: DeviceKey = (driver, _attribute(attributes, driver, "type"), _attribute(attributes, driver, "productName"))
        counts[key] = counts.get(key, 0) + 1
        size = quantity.parse(_mapping(_qualified(_mapping(body.get("capacity")), driver, "memory")).get("value"))
        if size is not None:
            memory[key] = min(memory.get(key, size), size)
    return SliceEntry(node, tuple((key, n, memory.get(key)) for key, n in sorted(counts.items(), key=repr)))


def _qualified(values: Mapping[str, Any], driver: str, name: str) -> Any:
    """An attribute or capacity in the driver's own domain: bare (``type``) or qualified with it
    (``gpu.nvidia.com/type``), as the API resolves a bare name (another domain's is another attribute)."""
    return values[name] if name in values else values.get(f"{driver}/{name}")


def _attribute(attributes: Mapping[str, Any], driver: str, name: str) -> str | None:
    value = _mapping(_qualified(attributes, driver, name))
    found = next((value[t] for t in ("string", "version", "int", "bool") if t in value), None)
    return None if found is None else str(found)


def slice_devices(objects: Iterable[Mapping[str, Any]]) -> dict[str, NodeDevices]:
    """DRA devices per node, from ``resource.k8s.io`` ResourceSlices (those published for one node)."""
    return count_slices(entry for obj in objects if (entry := slice_entry(obj)) is not None)


def count_slices(entries: Iterable[SliceEntry]) -> dict[str, NodeDevices]:
    """Devices per node from ``slice_entry`` records (devices published in several slices add up)."""
    counts: dict[str, dict[DeviceKey, int]] = {}
    memory: dict[str, dict[DeviceKey, Decimal]] = {}
    for entry in entries:
        mine, sizes = counts.setdefault(entry.node, {}), memory.setdefault(entry.node, {})
        for key, n, size in entry.devices:
            mine[key] = mine.get(key, 0) + n
            if size is not None:
                sizes[key] = min(sizes.get(key, size), size)
    return {node: NodeDevices(per_key, memory[node]) for node, per_key in counts.items()}


def with_slice_devices(nodes: list[Mapping[str, Any]], slices: Mapping[str, NodeDevices],
                       classes: Iterable[DeviceClass]) -> list[Mapping[str, Any]]:
    """``nodes`` with the devices their ResourceSlices publish counted as the extended resource a DeviceClass maps
    them to (DRA extended resources, KEP-5004): a DRA-only node advertises no ``nvidia.com/gpu`` allocatable, yet
    a pod asking ``nvidia.com/gpu`` is served by its driver's devices, those the class selects (whole GPUs, not
    their MIG partitions).  A node that advertises the resource itself keeps its own count."""
    mapping = [(c.extended_resource, c) for c in classes if c.extended_resource is not None and c.drivers]
    out: list[Mapping[str, Any]] = []
    for node in nodes:
        name = _mapping(node.get("metadata")).get("name")
        published = slices.get(name) if isinstance(name, str) else None
        extra: dict[str, int] = {}
        if published is not None:
            for resource, found in mapping:
                count = found.count(published.counts, published.memory)
                extra[resource] = max(extra.get(resource, 0), count)  # two classes of one name: the larger, not both
        status = _mapping(node.get("status"))
        allocatable = dict(_mapping(status.get("allocatable")))
        extra = {r: n for r, n in extra.items() if n > 0 and not quantity.parse(allocatable.get(r) or 0)}
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
                 slice_entries: Iterable[SliceEntry] = ()) -> Inventory:
    """An inventory from Node, Karpenter NodePool, DRA DeviceClass and ResourceSlice objects (Lists unpacked) plus
    declared pools; a node's ResourceSlices count as the extended resource a DeviceClass maps their devices to.
    ``slice_entries`` stands for slices already reduced (``slice_entry``), as the server's watch keeps them."""
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
    reduced = [entry for obj in slices if (entry := slice_entry(obj)) is not None]
    counts = count_slices([*reduced, *slice_entries])
    if counts:
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
