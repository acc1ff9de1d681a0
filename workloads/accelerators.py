"""Accelerator profiles: what gpuguard knows about each accelerator resource.

Every accelerator is not "an NVIDIA GPU".  A TPU node has no ``nvidia.com/gpu.present``
label, a MIG slice is a seventh of a GPU and needs a seventh of its CPU and memory, a
trn1.32xlarge has 16 Neuron devices, and a pod that gets its GPUs through a DRA claim names
no extended resource at all.  A profile says, for one resource name (or glob) or DRA
DeviceClass:

- how nodes that have it are selected (one node-affinity expression, or none: the scheduler
  already places a pod only where its extended resource is allocatable);
- the tolerations its pods need;
- how companion CPU/memory/ephemeral storage are sized: per whole device, per slice as a
  fraction of a parent device's sizing, or not at all;
- the most one node has, and whether fractions are refused.

Policies never name a vendor: they ask this model.  The shipped profiles live in
``policies/default-config.yaml`` (documented with sources in ``docs/accelerators.md``); a
config's ``accelerators`` list is merged into them by name.

This module imports nothing from ``policies`` (the policies import the workload view, which
uses the compiled profiles): it must stay importable first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fnmatch import fnmatchcase
from functools import cached_property, lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gpuguard.workloads import quantity
from gpuguard.workloads.prices import Prices


class _Model(BaseModel):
    """camelCase keys, unknown keys refused: the same contract as every other config model."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class NodeSelection(_Model):
    """One node-affinity expression for nodes that have this accelerator (the fallback without an inventory)."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = "In"
    values: list[str] = Field(default_factory=list)
    required: bool = Field(False, description="Without a node inventory, add it as a required term (else "
                           "preferred): only where every node with this accelerator is known to carry the label.")

    @model_validator(mode="after")
    def _values_match_operator(self) -> NodeSelection:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def expression(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out

    def negated(self) -> dict[str, Any]:
        """The expression that keeps a pod *off* these nodes."""
        if self.operator == "In":
            return {"key": self.key, "operator": "NotIn", "values": list(self.values)}
        if self.operator == "Exists":
            return {"key": self.key, "operator": "DoesNotExist"}
        if self.operator == "NotIn":
            return {"key": self.key, "operator": "In", "values": list(self.values)}
        return {"key": self.key, "operator": "Exists"}


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = "NoSchedule"

    def as_k8s(self) -> dict:
        return self.model_dump(exclude_none=True)


class Preferred(_Model):
    """A soft node preference (e.g. a GPU product) for pods of this accelerator."""

    key: str = Field(min_length=1)
    values: list[str] = Field(min_length=1)
    weight: int = Field(50, ge=1, le=100)


class FractionFromName(_Model):
    """A slice's share of its parent read from the resource name: ``int(group 1) / denominator``."""

    pattern: str
    denominator: int = Field(ge=1)

    @field_validator("pattern")
    @classmethod
    def _one_group(cls, value: str) -> str:
        try:
            compiled = re.compile(value)
        except re.error as exc:
            raise ValueError(f"invalid regular expression: {exc}") from None
        if compiled.groups < 1:
            raise ValueError("the pattern needs one group that captures the slice count")
        return value


class FractionFromResource(_Model):
    """A slice's share read from a companion resource of the same container, e.g. cores in percent."""

    name: str
    whole: int = Field(ge=1, description="The value that means one whole device (100 for a percentage).")


def _check_quantity(value: str | None) -> str | None:
    if value is not None and quantity.parse(value) is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    return value


class Sizing(_Model):
    """Companion CPU, memory and ephemeral storage for containers that use the accelerator."""

    mode: Literal["perDevice", "perSlice", "none"] = "perDevice"
    cpu: str | None = None
    memory: str | None = None
    ephemeral_storage: str | None = None
    slice_of: str | None = Field(None, description="perSlice: the profile whose per-device sizing is scaled.")
    fraction: float | None = Field(None, gt=0, le=1, description="perSlice: the share of the parent device, "
                                   "when neither the name nor a companion resource says.")
    fraction_from_name: FractionFromName | None = None
    fraction_from_resources: list[FractionFromResource] = Field(default_factory=list)

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _is_quantity(cls, value: str | None) -> str | None:
        return _check_quantity(value)

    @model_validator(mode="after")
    def _consistent(self) -> Sizing:
        if self.mode == "perDevice" and not (self.cpu or self.memory or self.ephemeral_storage):
            raise ValueError("perDevice sizing needs cpu, memory or ephemeralStorage")
        if self.mode == "perSlice":
            if not self.slice_of:
                raise ValueError("perSlice sizing needs sliceOf (the parent profile)")
            if self.fraction is None and self.fraction_from_name is None and not self.fraction_from_resources:
                raise ValueError("perSlice sizing needs fraction, fractionFromName or fractionFromResources")
        return self


class ProfileSpec(_Model):
    """One accelerator profile as written in the config."""

    name: str = Field(min_length=1)
    disabled: bool = Field(False, description="Drop a shipped profile of this name.")
    resources: list[str] = Field(default_factory=list, description="Extended resource names or globs.")
    except_resources: list[str] = Field(
        default_factory=list, description="Names or globs the `resources` globs match that are not devices (a "
        "sharing layer's memory or core requests beside the device count, e.g. HAMi's `huawei.com/Ascend910B-memory`).")
    when_also_requested: list[str] = Field(
        default_factory=list, description="Only when the same container also requests one of these resources "
        "(a sharing layer that reuses the whole-device name, e.g. vGPU cores/memory).")
    device_classes: list[str] = Field(default_factory=list, description="DRA DeviceClass names or globs.")
    node_selection: NodeSelection | None = None
    tolerations: list[Toleration] = Field(default_factory=list)
    sizing: Sizing = Field(default_factory=lambda: Sizing(mode="none"))
    max_per_node: int | None = Field(None, ge=1, description="The most one node has (per pod cap).")
    whole_only: bool = Field(True, description="Refuse fractional requests (extended resources are integers).")
    preferred: list[Preferred] = Field(default_factory=list)
    vendor: str | None = Field(
        None, min_length=1, description="Who makes the device (accelerators of two vendors never share a node). "
        "Default: the device's domain, of the profile it slices (sliceOf) if any, else of its first resource or "
        "DeviceClass (`nvidia.com`, `amd.com`).")
    description: str = ""

    @model_validator(mode="after")
    def _names_something(self) -> ProfileSpec:
        if not self.disabled and not self.resources and not self.device_classes:
            raise ValueError("a profile needs resources or deviceClasses")
        return self


# ---------------------------------------------------------------- compiled profiles

@dataclass(frozen=True)
class Size:
    """Companion requests per device, as Decimals (``None``: not sized)."""

    cpu: Decimal | None
    memory: Decimal | None
    ephemeral_storage: Decimal | None

    def scaled(self, factor: Decimal | int) -> Size:
        cpu, memory, disk = self.cpu, self.memory, self.ephemeral_storage
        return Size(None if cpu is None else cpu * factor, None if memory is None else memory * factor,
                    None if disk is None else disk * factor)

    def plus(self, other: Size) -> Size:
        if self is NO_SIZE:
            return other
        return Size(_add(self.cpu, other.cpu), _add(self.memory, other.memory),
                    _add(self.ephemeral_storage, other.ephemeral_storage))


def _add(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    if a is None:
        return b
    return a if b is None else a + b


NO_SIZE = Size(None, None, None)
_MEMO_COUNTS = 64  # device counts per container whose perDevice size a profile keeps


@dataclass(frozen=True, eq=False)
class Profile:
    """A compiled accelerator profile (what the policies read)."""

    name: str
    spec: ProfileSpec
    per_device: Size  # the whole-device size (for perSlice: the parent's)

    @property
    def node_selection(self) -> NodeSelection | None:
        return self.spec.node_selection

    @property
    def tolerations(self) -> list[dict]:
        """Fresh dicts on every call: policies put them into objects."""
        return [dict(t) for t in self._tolerations]

    @cached_property
    def _tolerations(self) -> tuple[dict, ...]:
        return tuple(t.as_k8s() for t in self.spec.tolerations)  # flat: key, operator, value, effect

    @property
    def max_per_node(self) -> int | None:
        return self.spec.max_per_node

    @property
    def whole_only(self) -> bool:
        return self.spec.whole_only

    @cached_property
    def is_slice(self) -> bool:
        return self.spec.sizing.mode == "perSlice"

    @cached_property
    def sizing_mode(self) -> str:
        return self.spec.sizing.mode

    @cached_property
    def _per_device_by_count(self) -> dict[int, Size]:
        """perDevice sizes by device count, kept for the usual counts (every review of a shape asks again)."""
        return {}

    def fraction(self, resource: str, container_resources: Mapping[str, Any] | None = None) -> Decimal:
        """The share of a whole device one unit of ``resource`` is (1 for whole devices)."""
        sizing = self.spec.sizing
        if sizing.mode != "perSlice":
            return Decimal(1)
        for source in sizing.fraction_from_resources:
            value = quantity.parse((container_resources or {}).get(source.name))
            if value is not None and value > 0:
                return min(Decimal(1), value / Decimal(source.whole))
        if sizing.fraction_from_name is not None:
            match = re.search(sizing.fraction_from_name.pattern, resource)
            if match:
                try:
                    return min(Decimal(1), Decimal(int(match.group(1))) / sizing.fraction_from_name.denominator)
                except (ValueError, IndexError):
                    pass
        return Decimal(str(sizing.fraction)) if sizing.fraction is not None else Decimal(1)

    def size_for(self, resource: str, count: int, container_resources: Mapping[str, Any] | None = None) -> Size:
        """Companion requests for ``count`` units of ``resource`` in one container."""
        mode = self.sizing_mode
        if mode == "none" or count <= 0:
            return NO_SIZE
        if mode == "perDevice":
            if count > _MEMO_COUNTS:
                return self.per_device.scaled(count)
            by_count = self._per_device_by_count
            size = by_count.get(count)
            if size is None:
                size = by_count[count] = self.per_device.scaled(count)
            return size
        return self.per_device.scaled(self.fraction(resource, container_resources) * count)


def _size(spec: Sizing) -> Size:
    return Size(quantity.parse(spec.cpu), quantity.parse(spec.memory), quantity.parse(spec.ephemeral_storage))


class AcceleratorError(ValueError):
    """A profile list that cannot be compiled (unknown parent, cycle); ``name`` is the profile's."""

    def __init__(self, message: str, name: str):
        super().__init__(message)
        self.name = name


class Accelerators:
    """The compiled profile list: resource name -> profile, DeviceClass -> profile, in order."""

    def __init__(self, specs: Iterable[ProfileSpec], mapped_resources: Mapping[str, str] | None = None,
                 mapped_classes: Mapping[str, str] | None = None):
        """``mapped_resources`` / ``mapped_classes``: extended resource or DeviceClass -> the name of the profile
        it is served by, whatever the globs say (what the cluster's DeviceClasses declare; see :meth:`learn`)."""
        self.specs = tuple(specs)
        live = [s for s in self.specs if not s.disabled]
        by_name = {s.name: s for s in live}
        self.profiles: tuple[Profile, ...] = tuple(Profile(s.name, s, self._per_device(s, by_name)) for s in live)
        self.by_name = {p.name: p for p in self.profiles}
        self._mapped_resources = {r: self.by_name[n] for r, n in (mapped_resources or {}).items() if n in self.by_name}
        self._mapped_classes = {c: self.by_name[n] for c, n in (mapped_classes or {}).items() if n in self.by_name}
        self._candidates = lru_cache(maxsize=2048)(self._candidates_uncached)
        self._wanted_cache: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {}
        self._for_class = lru_cache(maxsize=512)(self._for_class_uncached)
        # KubeAI's resource profiles (name -> requests, limits and pod fields), from the config's
        # ``kubeai.resourceProfiles`` merged over the KubeAI chart's; ``None``: the chart's alone.
        self.kubeai_profiles: dict[str, dict] | None = None
        # The config's price table (``cost``), for findings that say what idle devices cost; ``None``: no prices.
        self.prices: Prices | None = None
        # The profiles the config alone makes (what :meth:`learn` starts from), and what was learned on top.
        self.base: Accelerators = self
        self.learned: tuple[str, ...] = ()

    def resource_patterns(self) -> tuple[str, ...]:
        """Every extended-resource name or glob some profile claims (the webhook's matchConditions)."""
        seen: dict[str, None] = {}
        for profile in self.profiles:
            seen.update(dict.fromkeys(profile.spec.resources))
        return tuple(seen)

    @staticmethod
    def _per_device(spec: ProfileSpec, by_name: dict[str, ProfileSpec]) -> Size:
        seen = {spec.name}
        current = spec
        while current.sizing.mode == "perSlice":
            parent_name = current.sizing.slice_of or ""
            parent = by_name.get(parent_name)
            if parent is None:
                raise AcceleratorError(f"sizing.sliceOf names {parent_name!r}, which is not a profile", spec.name)
            if parent.name in seen:
                raise AcceleratorError(f"sizing.sliceOf makes a cycle through {parent.name!r}", spec.name)
            seen.add(parent.name)
            current = parent
        return NO_SIZE if current.sizing.mode == "none" else _size(current.sizing)

    def _candidates_uncached(self, resource: str) -> tuple[Profile, ...]:
        mapped = self._mapped_resources.get(resource)
        if mapped is not None:  # a DeviceClass serves this extended resource (DRA extended resources)
            return (mapped,)
        return tuple(p for p in self.profiles if any(fnmatchcase(resource, pat) for pat in p.spec.resources)
                     and not any(fnmatchcase(resource, pat) for pat in p.spec.except_resources))

    def is_accelerator(self, resource: str) -> bool:
        """Whether ``resource`` is an accelerator under some profile (used for the fast first pass)."""
        return bool(self._candidates(resource))

    def profile_for(self, resource: str, container_resources: Iterable[str] = (),
                    resources: Mapping[str, Any] | None = None) -> Profile | None:
        """The first profile for ``resource`` whose ``whenAlsoRequested`` condition holds.

        The container's other resource names come as ``container_resources``, or are read from its
        ``resources`` dict (requests and limits) only if a candidate profile needs them.
        """
        candidates = self._candidates(resource)
        if not candidates:
            return None
        names: set[str] | None = None
        for profile in candidates:
            wanted = profile.spec.when_also_requested
            if not wanted:
                return profile
            if names is None:
                names = set(container_resources)
                for section in ("requests", "limits"):
                    values = resources.get(section) if resources is not None else None
                    if isinstance(values, dict):
                        names.update(values)  # JSON keys: strings
            exact, globs = self._wanted(profile.name)
            if not exact.isdisjoint(names):
                return profile
            if globs and any(fnmatchcase(str(n), pat) for n in names for pat in globs):
                return profile
        return None

    def _wanted(self, name: str) -> tuple[frozenset[str], tuple[str, ...]]:
        """A profile's ``whenAlsoRequested`` split into exact names (a set test) and globs (compiled once)."""
        cached = self._wanted_cache.get(name)
        if cached is None:
            patterns = self.by_name[name].spec.when_also_requested
            cached = (frozenset(p for p in patterns if not any(ch in p for ch in "*?[")),
                      tuple(p for p in patterns if any(ch in p for ch in "*?[")))
            self._wanted_cache[name] = cached
        return cached

    def _for_class_uncached(self, device_class: str) -> Profile | None:
        mapped = self._mapped_classes.get(device_class)
        if mapped is not None:
            return mapped
        for profile in self.profiles:
            if any(fnmatchcase(device_class, pat) for pat in profile.spec.device_classes):
                return profile
        return None

    def for_device_class(self, device_class: str) -> Profile | None:
        return self._for_class(device_class)

    def vendor_of(self, profile: Profile, name: str) -> str:
        """Who makes the device ``name`` (an extended resource or DeviceClass ``profile`` serves): the profile's
        ``vendor``, else that of the profile it slices (``sliceOf``, followed to the whole device), else the
        registrable domain of that profile's first resource or DeviceClass (``gpu.nvidia.com`` -> ``nvidia.com``),
        else of ``name``."""
        spec, seen = profile.spec, {profile.name}
        while spec.vendor is None and spec.sizing.mode == "perSlice":
            parent = self.by_name.get(spec.sizing.slice_of or "")
            if parent is None or parent.name in seen:
                break
            seen.add(parent.name)
            spec = parent.spec
        if spec.vendor is not None:
            return spec.vendor.lower()
        for pattern in (*spec.resources, *spec.device_classes, name):
            domain = pattern.split("/", 1)[0].lower()
            if "." in domain and not any(ch in domain for ch in "*?["):
                return ".".join(domain.split(".")[-2:])
        return name.lower()


    # ------------------------------------------------------------ learned from the cluster
    def companions(self) -> frozenset[str]:
        """Exact names the profiles read as companions of a device, never devices themselves: ``whenAlsoRequested``
        (HAMi's ``nvidia.com/gpucores``), ``fractionFromResources`` names and exact ``exceptResources``."""
        out: set[str] = set()
        for profile in self.profiles:
            spec = profile.spec
            out.update(spec.when_also_requested)
            out.update(source.name for source in spec.sizing.fraction_from_resources)
            out.update(spec.except_resources)
        return frozenset(n for n in out if not any(ch in n for ch in "*?["))

    def learn(self, facts: Learned) -> Accelerators:
        """These profiles plus what the cluster says is an accelerator (``facts``); always from :attr:`base`, so
        learning again replaces what was learned before.  Returns :attr:`base` itself when nothing is learned.

        - a DeviceClass that maps an extended resource name (``spec.extendedResourceName``, DRA extended
          resources) makes that name count as an accelerator: with the class's profile, else the resource's own,
          else a generic one; claims of the class count with the same profile;
        - a DeviceClass no profile names (and not a non-accelerator by name) makes claims of it count, with a
          generic profile;
        - an extended resource the nodes advertise that no profile names and that may be an accelerator
          (:func:`may_be_accelerator`, not a profile's companion) counts, with a generic profile: no node
          selection (the scheduler places by the resource), the tolerations of the taints whose key is the
          resource name (the ExtendedResourceToleration convention), no sizing (never a guess), no per-node cap
          beyond what the nodes themselves say.
        """
        base = self.base
        if facts.empty:
            return base
        specs = list(base.specs)
        names = {s.name for s in specs}
        mapped_resources: dict[str, str] = {}
        mapped_classes: dict[str, str] = {}
        notes: list[str] = []

        def add(spec: ProfileSpec) -> str:
            if spec.name not in names:
                specs.append(spec)
                names.add(spec.name)
            return spec.name

        denied = facts.not_accelerators
        for device_class, resource in facts.device_classes:
            own = base.for_device_class(device_class)
            if own is None and not may_be_accelerator_class(device_class, denied):
                continue  # a NIC's, an IMEX channel's class: whatever it serves is no accelerator
            if resource:
                target = own or base.profile_for(resource)
                if target is None and not may_be_accelerator(resource, denied):
                    continue
                name = target.name if target is not None else add(_learned_spec(
                    f"dra:{device_class}", [resource], [device_class], facts.tolerations.get(resource, ()),
                    f"DeviceClass {device_class} (extendedResourceName {resource})"))
                mapped_resources[resource] = name
                if own is None:
                    mapped_classes[device_class] = name
                notes.append(f"{resource} is served by DeviceClass {device_class} (profile {name})")
            elif own is None:
                add(_learned_spec(f"dra:{device_class}", [], [device_class], (), f"DeviceClass {device_class}"))
                notes.append(f"DeviceClass {device_class} counts as an accelerator (generic profile)")
        companions = base.companions()
        for resource in facts.resources:
            if resource in mapped_resources or resource in companions or base.is_accelerator(resource) \
                    or not may_be_accelerator(resource, denied):
                continue
            add(_learned_spec(f"learned:{resource}", [resource], [], facts.tolerations.get(resource, ()),
                              "learned from the nodes' allocatable"))
            notes.append(f"{resource} counts as an accelerator (advertised by the nodes; generic profile)")
        if not notes:
            return base
        learned = Accelerators(specs, mapped_resources, mapped_classes)
        learned.base, learned.learned = base, tuple(notes)
        learned.kubeai_profiles = base.kubeai_profiles
        learned.prices = base.prices
        return learned

    def unknown_resources(self, names: Iterable[Any]) -> list[str]:
        """Of ``names``, the extended resources that may be accelerators but that no profile (shipped, configured
        or learned) counts: what an offline judgement without the cluster's nodes could not tell."""
        companions = self.companions()
        return sorted({n for n in names if isinstance(n, str) and n not in companions and may_be_accelerator(n)
                       and not self.is_accelerator(n)})


# ---------------------------------------------------------------- what may be an accelerator

# Extended resources that are never accelerators, whoever advertises them (one rule for the node inventory, the
# learned profiles and the null-quantity check).  Globs, matched case-insensitively against the whole name.
NOT_ACCELERATORS: tuple[str, ...] = (
    # networking: RDMA shared devices (k8s-rdma-shared-dev-plugin's rdma/hca_shared_devices_a, NVIDIA Network
    # Operator's rdma_* pools), InfiniBand HCAs, SR-IOV VF pools (intel.com/intel_sriov_netdevice), the SR-IOV
    # Network Operator's default prefix, EKS's pod ENIs / private IPs / EFA adapters
    "*rdma*", "*/hca*", "*sriov*", "openshift.io/*", "vpc.amazonaws.com/*", "*/efa",
    # host devices for system software: FUSE, KVM, TUN, vhost-net, serial and audio (generic device plugins)
    "*/fuse", "smarter-devices/*", "squat.ai/*", "devices.kubevirt.io/*",
    # Intel trusted execution and offload engines (SGX enclave memory; QAT crypto/compression, DLB load
    # balancing, DSA data streaming, IAA analytics): not ML accelerators
    "intel.com/sgx*", "sgx.intel.com/*", "qat.intel.com/*", "dlb.intel.com/*", "dsa.intel.com/*", "iaa.intel.com/*",
    # a device's shares, not devices: the Intel GPU plugin's resource-management companions
    "gpu.intel.com/millicores", "gpu.intel.com/memory.max", "gpu.intel.com/tiles",
)
# DeviceClasses that are never accelerators: the same networking words, NVIDIA's IMEX channels and daemons
# (ComputeDomain), and Google's DRA network driver.
NOT_ACCELERATOR_CLASSES: tuple[str, ...] = (
    "*rdma*", "*sriov*", "*nic*", "*network*", "dranet*", "compute-domain-*.nvidia.com",
)
_RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")


@lru_cache(maxsize=4096)
def _not_listed(name: str, patterns: tuple[str, ...]) -> bool:
    lowered = name.lower()
    return not any(fnmatchcase(lowered, pattern.lower()) for pattern in patterns)


def may_be_accelerator(name: str, extra_denied: tuple[str, ...] = ()) -> bool:
    """Whether an extended resource may be an accelerator: a vendor-domain name (``vendor.example/device``) outside
    Kubernetes' own domains and not one of :data:`NOT_ACCELERATORS` (nor ``extra_denied``, the config's own)."""
    domain, slash, rest = name.partition("/")
    if not slash or not rest or "." not in domain:
        return False
    if any(domain == d or domain.endswith("." + d) for d in _RESERVED_DOMAINS):
        return False
    return _not_listed(name, NOT_ACCELERATORS + extra_denied)


def may_be_accelerator_class(name: str, extra_denied: tuple[str, ...] = ()) -> bool:
    """Whether a DeviceClass no profile names may still hold accelerators (not a NIC, an IMEX channel ...)."""
    return bool(name) and _not_listed(name, NOT_ACCELERATOR_CLASSES + extra_denied)


def _learned_spec(name: str, resources: list[str], device_classes: list[str], tolerations: Iterable[Mapping[str, Any]],
                  where: str) -> ProfileSpec:
    """A generic profile for an accelerator gpuguard knows only from the cluster: counted, never sized or placed."""
    return ProfileSpec(name=name, resources=resources, device_classes=device_classes,
                       tolerations=[Toleration.model_validate(dict(t)) for t in tolerations],
                       sizing=Sizing(mode="none"), description=f"learned: {where}")


@dataclass(frozen=True)
class Learned:
    """What the cluster says is an accelerator, for :meth:`Accelerators.learn` (read from the inventory)."""

    resources: tuple[str, ...] = ()  # extended resources the nodes (and pools) advertise
    tolerations: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)  # per resource
    device_classes: tuple[tuple[str, str | None], ...] = ()  # (DeviceClass, extendedResourceName or None)
    not_accelerators: tuple[str, ...] = ()  # the config's own additions to NOT_ACCELERATORS

    @property
    def empty(self) -> bool:
        return not self.resources and not self.device_classes


def merge_specs(defaults: list[dict[str, Any]], overrides: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge a config's ``accelerators`` list into the shipped one by ``name``.

    An entry with a shipped name replaces that profile's keys it sets (in place, so the order
    of first-match lookup stays); a new name goes *before* the shipped profiles, so an admin's
    more specific profile wins over a shipped glob.
    """
    merged = [dict(d) for d in defaults]
    index = {d.get("name"): i for i, d in enumerate(merged) if isinstance(d.get("name"), str)}
    added = []
    for entry in overrides:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name in index:
            merged[index[name]] = {**merged[index[name]], **entry}
        else:
            added.append(entry)
    return added + merged


# ---------------------------------------------------------------- KAI Scheduler GPU sharing

# NVIDIA KAI Scheduler shares GPUs by pod annotation, with no resource request: ``gpu-fraction`` (a share of
# each device, e.g. "0.5", on ``gpu-fraction-num-devices`` devices, default 1) or ``gpu-memory`` (MiB of one
# device), held by the container ``gpu-fraction-container-name`` names, else the first.  Such a pod holds
# part of a GPU that no other workload gets whole: gpuguard counts each shared device as one unit of the
# accelerator profile whose ``deviceClasses`` name ``KAI_SHARE`` (a name only this annotation stands for).
KAI_SHARE = "kai.scheduler/gpu-sharing"
KAI_FRACTION, KAI_MEMORY = "gpu-fraction", "gpu-memory"
KAI_DEVICES, KAI_CONTAINER = "gpu-fraction-num-devices", "gpu-fraction-container-name"


def kai_share(annotations: Any) -> tuple[int, str | None] | None:
    """(devices shared, the container named to hold them or ``None`` for the first) of a pod's KAI
    annotations, or ``None`` when it asks for no share.  A value KAI can't read still asks for one device:
    the pod is meant to hold a GPU, and counting it as none would let it past every cap."""
    if not isinstance(annotations, dict) or (KAI_FRACTION not in annotations and KAI_MEMORY not in annotations):
        return None
    devices = 1
    raw = annotations.get(KAI_DEVICES)
    if KAI_FRACTION in annotations and isinstance(raw, str) and raw.isdigit() and int(raw) > 0:
        devices = int(raw)
    name = annotations.get(KAI_CONTAINER)
    return devices, name if isinstance(name, str) and name else None
