"""default-resources: CPU, memory and ephemeral-storage requests and limits where missing.

Accelerator containers are sized by their profile (``workloads/accelerators.py``): per whole
device (match the node shape: a node with 8 GPUs, 96 CPUs and 1 TiB gives ~12 CPUs and
~128Gi per GPU), per slice as its fraction of the parent device (a MIG 1g slice gets a
seventh of a GPU's share, so the added requests fit the node and a Kueue quota), or not
at all; other containers get flat values.

A pod with pod-level ``spec.resources`` (Kubernetes 1.32+) has declared its budget, and the
apiserver requires the pod-level requests to cover the sum of the containers' (a real
1.33 apiserver rejects even a container ephemeral-storage request the pod level does not
cover), so gpuguard adds nothing to such a pod's containers: what it would add could only
push them over the pod's budget.  A memory
limit is added (equal to the request by default), because a GPU pod without one is
BestEffort or unbounded Burstable: first to be evicted, or free to OOM its neighbours.

With a node inventory (``workloads/inventory.py``), a device's share is read from the cluster:
the allocatable of the smallest node group (or pool) the pod can land on, less ``nodeReserve``,
divided by its devices, and capped by the profile's numbers, so a 2x L4 g2-standard-24 (24 vCPU,
96 GB) gets about 11 CPUs and 41Gi per GPU instead of the profile's 64Gi, which no such node has.
The object's ``gpuguard.io/sized-from`` annotation names the group the share came from.

Never lowers what the user set: a missing request next to a set limit stays missing (the
apiserver defaults it to the limit on the Pod), and a missing limit is never set below
the request.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache

import orjson
from pydantic import Field, field_validator

from gpuguard.policies.base import ConfigModel, CpuScope, MutatingPolicy, PolicySettings, cpu_objects_if
from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import Size as DeviceSize
from gpuguard.workloads.inventory import NODE_RESOURCES, Inventory, NodeGroup
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView

SIZED_FROM_ANNOTATION = "gpuguard.io/sized-from"


class Size(ConfigModel):
    cpu: str
    memory: str
    ephemeral_storage: str

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _is_quantity(cls, value: str) -> str:
        if quantity.parse(value) is None:
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return value


class Settings(PolicySettings):
    non_gpu: Size = Field(default_factory=lambda: Size(cpu="500m", memory="1Gi", ephemeral_storage="2Gi"),
                          description="Requests for containers without GPUs.")
    memory_limit_factor: dict[str, float] = Field(
        default_factory=lambda: {"training": 1.0, "inference": 1.0, "notebook": 1.0},
        description="Memory limit = request x factor, by workload class (1.0 = Guaranteed-friendly).")
    ephemeral_storage_limit_factor: float = Field(2.0, ge=1.0)
    set_cpu_limit: bool = Field(False, description="Also set a CPU limit equal to the request "
                                "(throttles data loaders; off by default).")
    apply_to_non_gpu_pods: bool = Field(False, description="Also size pods that request no GPU.")
    node_reserve: Size = Field(default_factory=lambda: Size(cpu="1", memory="4Gi", ephemeral_storage="10Gi"),
                               description="With a node inventory: per node, left out of the share its devices "
                               "get (daemons and other pods' headroom).")


# Pure functions of a few recurring values (the same sizes on every review of one shape): memoised,
# typed so that 1 and 1.0 (which give Decimals of different exponents) are kept apart.
@lru_cache(maxsize=1024, typed=True)
def _scaled(text: str, factor: int | float | Decimal) -> Decimal:
    value = quantity.parse(text)
    return (value or Decimal(0)) * _decimal(factor)


@lru_cache(maxsize=256, typed=True)
def _decimal(factor: int | float | Decimal) -> Decimal:
    return Decimal(str(factor))


@lru_cache(maxsize=1024)
def _cpu(value: Decimal) -> str:
    """Whole millicores, rounded up (a slice's share is rarely a round number)."""
    return quantity.format_cpu(Decimal(math.ceil(value * 1000)) / 1000)


@lru_cache(maxsize=1024)
def _bytes(value: Decimal) -> str:
    """Whole MiB, rounded up, unless the value is already whole bytes of a round size."""
    mib = 2**20
    if value == value.to_integral_value() and (value % mib == 0 or value < mib):
        return quantity.format_bytes(value)
    return quantity.format_bytes(Decimal(math.ceil(value / mib) * mib))


def _fill(container: Container, name: str, request: Decimal, limit_factor: float | None,
          fmt: Callable[[Decimal], str]) -> bool:
    """Set ``name``'s request and limit where missing, never below what the user set.

    Through the container's own setters: a Spark driver/executor takes them as ``coreRequest``
    and ``memory`` (``gpuguard.workloads.containers.SparkContainer``)."""
    if not container.can_set_resources():
        return False  # malformed: leave it to the apiserver's validation
    user_request = quantity.parse(container.declared("requests", name))
    user_limit = quantity.parse(container.declared("limits", name))
    changed = False
    if user_request is None and user_limit is None:
        text = fmt(request)
        changed = container.set_resource("requests", name, text)
        # The limit follows the request as written (rounded), so a second pass computes the same one.
        user_request = quantity.parse(text) if limit_factor is not None else request
    if limit_factor is not None and user_limit is None and user_request is not None:
        changed |= container.set_resource("limits", name, fmt(user_request * _decimal(limit_factor)))
    return changed


# A share: resource -> (node resource -> amount per unit of that resource), and the group it came from.
Share = tuple[dict[str, dict[str, Decimal]], NodeGroup]


def _node_share(template: PodTemplate, inventory: Inventory, reserve: Size) -> tuple[Share | None, tuple]:
    """Per accelerator unit, the CPU/memory/disk of the smallest node group the pod can land on, and the
    memo key it is kept under (what sizes derived from it are kept under too)."""
    resources = sorted(r for r in template.effective_gpus if "/" in r)
    if not resources or not inventory.known:
        return None, ()
    key = ("share", tuple((r, template.effective_gpus[r]) for r in resources),
           orjson.dumps((template.spec.get("nodeSelector"), template.spec.get("tolerations")), default=str,
                        option=orjson.OPT_NON_STR_KEYS), reserve.cpu, reserve.memory, reserve.ephemeral_storage)
    share: Share | None = inventory.memo(key, lambda: _compute_share(template, inventory, reserve, resources))
    return share, key


def _compute_share(template: PodTemplate, inventory: Inventory, reserve: Size, resources: list[str]) -> Share | None:
    # groups whose nodes can hold the pod's devices at all (the others are schedulable's to report)
    groups = [g for g in inventory.eligible(resources) if g.shape_known
              and all(g.smallest.get(r, Decimal(0)) >= template.effective_gpus[r] for r in resources)]
    selector = template.spec.get("nodeSelector")
    tolerations = template.spec.get("tolerations")
    fitting = [g for g in groups if g.matches(selector if isinstance(selector, dict) else None, None)
               and not g.untolerated(tolerations if isinstance(tolerations, list) else [])]
    groups = fitting or groups
    if not groups:
        return None
    first = resources[0]
    group = min(groups, key=lambda g: (g.smallest.get("memory", Decimal(0)) / g.smallest[first], g.name))
    kept = {"cpu": _scaled(reserve.cpu, 1), "memory": _scaled(reserve.memory, 1),
            "ephemeral-storage": _scaled(reserve.ephemeral_storage, 1)}
    # Each resource by itself is the smallest per-device share among the groups the pod may land on: sized from
    # one group (the L4 nodes' 42 Gi of disk per GPU), a pod that lands on another (an H100 node's 22 Gi per GPU)
    # would let fewer pods fit than it has devices, and the rest would idle.
    share: dict[str, dict[str, Decimal]] = {}
    for resource in resources:
        per_unit: dict[str, Decimal] = {}
        for candidate in groups:
            devices = candidate.smallest.get(resource, Decimal(0))
            if devices <= 0:
                return None
            for x in NODE_RESOURCES:
                # A node that lists no such resource has none to give: kube-scheduler finds any request of it
                # "Insufficient", so the default is left unset rather than be why the pod pends.
                left = candidate.smallest[x] - kept[x] if x in candidate.smallest else Decimal(0)
                amount = max(Decimal(0), left) / devices
                per_unit[x] = min(per_unit.get(x, amount), amount)
        share[resource] = per_unit
    return share, group


def _capped(profile: DeviceSize, container: Container, share: Share | None) -> DeviceSize:
    """The profile's size, lowered to the container's devices' share of the node (never raised)."""
    if share is None:
        return profile
    per_unit, _ = share

    def node(name: str) -> Decimal | None:
        if not all(r in per_unit and name in per_unit[r] for r in container.gpus):
            return None
        return sum((per_unit[r][name] * n for r, n in container.gpus.items()), Decimal(0))

    def cap(value: Decimal | None, name: str) -> Decimal | None:
        limit = node(name)
        return value if value is None or limit is None else min(value, limit)

    return DeviceSize(cap(profile.cpu, "cpu"), cap(profile.memory, "memory"),
                      cap(profile.ephemeral_storage, "ephemeral-storage"))


def _size_container(container: Container, template: PodTemplate, settings: Settings, memory_factor: float,
                    share: Share | None = None, inventory: Inventory | None = None, share_key: tuple = ()) -> bool:
    if template.has_pod_resources:
        return False  # the pod's own budget (see the module docstring)
    if container.gpu_count:
        profile_size = container.companion_size()
        if share is None or inventory is None:
            size = profile_size
        else:  # the same share and devices give the same size: reviews of one shape ask again and again
            key = ("capped", share_key, profile_size, tuple(sorted(container.gpus.items())))
            size = inventory.memo(key, lambda: _capped(profile_size, container, share))
        cpu, memory, disk = size.cpu, size.memory, size.ephemeral_storage
    else:
        flat = settings.non_gpu
        cpu, memory, disk = (_scaled(flat.cpu, 1), _scaled(flat.memory, 1), _scaled(flat.ephemeral_storage, 1))
    changed = False
    # Nothing of a resource left on the nodes it may land on (None or 0): no default of it.
    if cpu:
        changed |= _fill(container, "cpu", cpu, 1.0 if settings.set_cpu_limit else None, _cpu)
    if memory:
        changed |= _fill(container, "memory", memory, memory_factor, _bytes)
    if disk:
        changed |= _fill(container, "ephemeral-storage", disk, settings.ephemeral_storage_limit_factor, _bytes)
    return changed


def mutate(view: WorkloadView, settings: Settings) -> bool:
    if not (view.is_gpu or settings.apply_to_non_gpu_pods):
        return False
    changed = False
    memory_factor = settings.memory_limit_factor.get(view.workload_class, 1.0)
    sources: list[str] = []
    for template in view.templates:
        share, key = _node_share(template, view.inventory, settings.node_reserve) if template.gpus_per_pod \
            else (None, ())
        sized = False
        for container in template.containers:
            sized |= _size_container(container, template, settings, memory_factor, share, view.inventory, key)
        if sized and share is not None:
            sources.append(f"{template.ref.role or 'pod'}: {share[1].describe()}")
        changed |= sized
    if sources:
        _record(view, "; ".join(dict.fromkeys(sources)))
    return changed


def _record(view: WorkloadView, text: str) -> None:
    """Say which node group the devices' share came from (the mutation record)."""
    annotations = view.writable_annotations()
    if annotations is not None:
        annotations[SIZED_FROM_ANNOTATION] = text


def cpu_scope(settings: Settings) -> CpuScope:
    """Pods without GPUs too when ``applyToNonGpuPods`` is on."""
    return cpu_objects_if(settings.apply_to_non_gpu_pods)


POLICY = MutatingPolicy(
    id="default-resources",
    title="Size CPU, memory and ephemeral storage per accelerator",
    settings_model=Settings,
    run=mutate,
    description="Adds missing CPU, memory and ephemeral-storage requests and limits: for accelerator containers, "
    "with a node inventory each device's share of the smallest eligible node group less `nodeReserve`, capped by the "
    "profile (the group is named in `gpuguard.io/sized-from`); otherwise by each accelerator profile's sizing, per "
    "device (whole NVIDIA GPU 8 CPU, 64Gi, 50Gi; TPU chip 20 CPU, 40Gi), per slice as a fraction of its parent "
    "(MIG `1g` = 1/7, HAMi vGPU by its cores) or none; flat for the others; memory "
    "limit = request; never lowers a value the user set, and adds nothing to a pod with pod-level `spec.resources` "
    "(its budget).",
    rationale="A GPU pod with only a GPU limit is BestEffort: evicted first under memory pressure and "
    "free to starve its data loaders; right-sized requests keep a node's GPUs usable.",
    cpu_scope=cpu_scope,
    writes=("containers[].resources", "initContainers[].resources"),
)
