"""The workload view: what the policies see of an object.

A policy never walks a raw object.  It gets a ``WorkloadView``: the kind, the workload class,
and every pod template with its containers and GPU counts already found.  The view holds
live references into the engine's working copy, so a mutating policy edits the object
through it, and the engine diffs the copy afterwards.

Everything here tolerates malformed input (nulls, wrong types, missing fields): an object
the apiserver would reject anyway must still get a decision, not an exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from workloads import quantity
from workloads.accelerators import NO_SIZE, Accelerators, Profile, Size
from workloads.claims import ClaimSource, attach_claims
from workloads.kinds import KindSpec, TemplateRef
from workloads.paths import Path, child_dict, dicts, dotted, get_path


class cached_property:  # noqa: N801 - a drop-in for functools.cached_property
    """``functools.cached_property`` without its per-instance lock (Python 3.11 takes an RLock on
    every first access, a measurable share of a 100 µs evaluation).  Views are never shared
    between threads while they are built."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn
        self.name = fn.__name__
        self.__doc__ = fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, cls: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


WORKLOAD_CLASS_LABEL = "gpuguard.io/workload-class"
# What a workload is, which decides the checks it gets and (through priority-class) its priority:
# serving (inference), training, offline batch inference, interactive notebooks, and short smoke
# tests / benchmarks.  The kind gives a default; a user may declare another (workload-class policy).
WORKLOAD_CLASSES = ("training", "inference", "batch-inference", "notebook", "smoke-test")


@dataclass
class Container:
    """One container (or init container) of a pod template."""

    index: int | None  # None: a single container held under its own key (KServe's predictor.model)
    list_name: str  # containers | initContainers | the key of a single-container field
    body: dict
    spec_path: Path
    gpus: dict[str, int] = field(default_factory=dict)  # extended resource -> accelerator units asked for
    profiles: dict[str, Profile] = field(default_factory=dict)  # extended resource -> its profile
    # DRA devices of the pod's claims this container is the first to reference: device class -> count
    claim_devices: dict[str, int] = field(default_factory=dict)
    claim_profiles: dict[str, Profile] = field(default_factory=dict)

    @property
    def name(self) -> str:
        name = self.body.get("name")
        return name if isinstance(name, str) else (self.list_name if self.index is None else f"#{self.index}")

    @property
    def path(self) -> Path:
        if self.index is None:
            return self.spec_path + (self.list_name,)
        return self.spec_path + (self.list_name, self.index)

    @property
    def gpu_count(self) -> int:
        """Accelerator units this container holds: extended resources plus DRA devices attributed to it."""
        return sum(self.gpus.values()) + sum(self.claim_devices.values())

    @property
    def is_init(self) -> bool:
        return self.list_name == "initContainers"

    @property
    def is_sidecar(self) -> bool:
        """A native sidecar: an init container with ``restartPolicy: Always``, running beside the app."""
        return self.is_init and self.body.get("restartPolicy") == "Always"

    @property
    def runs_with_app(self) -> bool:
        """App containers and native sidecars: what runs (and holds devices) for the pod's life."""
        return not self.is_init or self.is_sidecar

    def accelerator_units(self) -> Iterator[tuple[str, int, Profile]]:
        """(resource or device class, units, profile) of everything accelerator this container holds."""
        for resource, count in self.gpus.items():
            yield resource, count, self.profiles[resource]
        for device_class, count in self.claim_devices.items():
            yield device_class, count, self.claim_profiles[device_class]

    def _quantities(self) -> dict[str, Any]:
        """requests overlaid with limits: what sharing layers read (e.g. vGPU cores in percent)."""
        res = self.resources() or {}
        requests, limits = res.get("requests"), res.get("limits")
        if not isinstance(requests, dict | None) or not isinstance(limits, dict | None):
            return {}
        return {**(requests or {}), **(limits or {})}

    def companion_size(self) -> Size:
        """CPU/memory/ephemeral storage this container's accelerators need beside them, by their profiles."""
        total, quantities = NO_SIZE, None
        for resource, count, profile in self.accelerator_units():
            if quantities is None and profile.is_slice:
                quantities = self._quantities()  # only slices read companion resources (e.g. vGPU cores)
            total = total.plus(profile.size_for(resource, count, quantities))
        return total

    def device_equivalents(self) -> Decimal:
        """Whole devices this container holds (a 1g MIG slice is 1/7 of one)."""
        whole, sliced, quantities = 0, Decimal(0), None
        for name, count, profile in self.accelerator_units():
            if not profile.is_slice:
                whole += count
                continue
            if quantities is None:
                quantities = self._quantities()
            sliced += profile.fraction(name, quantities) * count
        return sliced + whole

    def requests(self, names: Iterable[str]) -> dict[str, Decimal]:
        """The container's request per resource name (the limit when no request is set, as the apiserver
        defaults a Pod's requests from its limits)."""
        out: dict[str, Decimal] = {}
        for name in names:
            value = self.resource_value("requests", name)
            if value is None:
                value = self.resource_value("limits", name)
            amount = quantity.parse(value)
            if amount is not None:
                out[name] = amount
        return out

    def resources(self, create: bool = False) -> dict | None:
        """The container's ``resources`` dict (created on demand for mutators)."""
        if create:
            return child_dict(self.body, "resources")
        value = self.body.get("resources")
        return value if isinstance(value, dict) else None

    def resource_value(self, section: str, name: str) -> Any:
        res = self.resources()
        part = res.get(section) if res else None
        return part.get(name) if isinstance(part, dict) else None

    def memory_limit(self) -> Decimal | None:
        return quantity.parse(self.resource_value("limits", "memory"))

    def env(self) -> dict[str, Any]:
        """Env var name -> value (a string, or ``None`` for ``valueFrom`` references)."""
        out: dict[str, Any] = {}
        for _, var in dicts(self.body.get("env")):
            name = var.get("name")
            if isinstance(name, str):
                value = var.get("value")
                out[name] = value if isinstance(value, str) else None
        return out

    def env_from(self) -> bool:
        """Whether the container takes variables from ConfigMaps or Secrets (``envFrom``)."""
        return any("configMapRef" in src or "secretRef" in src for _, src in dicts(self.body.get("envFrom")))

    def mounts(self) -> list[dict]:
        return [m for _, m in dicts(self.body.get("volumeMounts"))]


@dataclass
class PodTemplate:
    """One pod template: its PodSpec, metadata and containers, inside the working copy."""

    ref: TemplateRef
    spec: dict
    root: dict
    containers: list[Container]
    # DRA devices of the pod's claims, device class -> count (each claim counted once per pod)
    claim_devices: dict[str, int] = field(default_factory=dict)
    claim_profiles: dict[str, Profile] = field(default_factory=dict)
    # claims gpuguard could not read: (path, message); reported as warnings, never counted as 0 silently
    unresolved_claims: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def spec_path(self) -> Path:
        return self.ref.spec_path

    @property
    def where(self) -> str:
        return dotted(self.ref.spec_path)

    @cached_property
    def effective_gpus(self) -> dict[str, int]:
        """The pod's effective request per accelerator resource, as the kubelet and scheduler count it,
        plus the devices of its DRA claims (by device class).

        Cached: policies never change accelerator counts, and every policy asks.
        """
        amounts = effective_requests(self.containers, lambda c: c.gpus)
        out = {name: int(value) for name, value in amounts.items() if value > 0}
        for device_class, count in self.claim_devices.items():
            out[device_class] = out.get(device_class, 0) + count
        return out

    @cached_property
    def gpus_per_pod(self) -> int:
        """Accelerator units one pod holds (init containers and native sidecars per the kubelet's rule)."""
        return sum(self.effective_gpus.values())

    @cached_property
    def profile_of(self) -> dict[str, Profile]:
        """Resource or device class -> profile, for everything this pod's containers and claims ask for."""
        out: dict[str, Profile] = dict(self.claim_profiles)
        for c in self.containers:
            out.update(c.profiles)
        return out

    @cached_property
    def per_profile(self) -> dict[str, int]:
        """Units per profile name in one pod (what a node must hold of that accelerator)."""
        out: dict[str, int] = {}
        for name, count in self.effective_gpus.items():
            profile = self.profile_of.get(name)
            if profile is not None:
                out[profile.name] = out.get(profile.name, 0) + count
        return out

    @cached_property
    def profiles(self) -> list[Profile]:
        """The distinct profiles this pod uses, in profile order of first appearance."""
        seen: dict[str, Profile] = {}
        for name in self.effective_gpus:
            profile = self.profile_of.get(name)
            if profile is not None:
                seen.setdefault(profile.name, profile)
        return list(seen.values())

    @cached_property
    def gpu_containers(self) -> list[Container]:
        return [c for c in self.containers if c.gpus or c.claim_devices]

    @cached_property
    def _pod_level(self) -> dict[str, dict[str, Any]]:
        res = self.spec.get("resources")
        out = {}
        for section in ("requests", "limits"):
            part = res.get(section) if isinstance(res, dict) else None
            out[section] = part if isinstance(part, dict) else {}
        return out

    def pod_resources(self, section: str) -> dict[str, Any]:
        """Pod-level ``spec.resources.<section>`` (requests|limits), ``{}`` when unset or malformed.
        (Cached: no policy writes pod-level resources.)"""
        return self._pod_level[section]

    @cached_property
    def has_pod_resources(self) -> bool:
        """Whether the pod declares pod-level ``spec.resources`` (its own budget for the containers)."""
        return bool(self._pod_level["requests"] or self._pod_level["limits"])

    def pod_request(self, name: str) -> Decimal:
        """The pod's effective request of a native resource: pod-level when set, else the kubelet's rule."""
        for section in ("requests", "limits"):
            value = quantity.parse(self.pod_resources(section).get(name))
            if value is not None:
                return value
        return effective_requests(self.containers, lambda c: c.requests((name,))).get(name, Decimal(0))

    def metadata(self, create: bool = False) -> dict | None:
        """The template's ObjectMeta (kinds with an inlined PodSpec have none)."""
        if self.ref.meta_path is None:
            return None
        parent = get_path(self.root, self.ref.meta_path[:-1])
        if create:
            return child_dict(parent, self.ref.meta_path[-1])
        value = parent.get(self.ref.meta_path[-1]) if isinstance(parent, dict) else None
        return value if isinstance(value, dict) else None

    def labels(self) -> dict:
        meta = self.metadata()
        labels = meta.get("labels") if meta else None
        return labels if isinstance(labels, dict) else {}

    def volumes(self) -> dict[str, dict]:
        """Volume name -> volume, for resolving mounts."""
        return {v["name"]: v for _, v in dicts(self.spec.get("volumes")) if isinstance(v.get("name"), str)}


@dataclass
class WorkloadView:
    """Everything a policy may look at for one object."""

    obj: dict
    kind: KindSpec
    workload_class: str
    templates: list[PodTemplate]
    # The class the kind (and the admin's byKind) gives, before any declaration by the user.
    kind_class: str = ""
    accelerators: Accelerators | None = None  # the config's profiles (for policies that look at all of them)

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        return name if isinstance(name, str) else (meta or {}).get("generateName") or "<unnamed>"

    @property
    def labels(self) -> dict:
        meta = self.obj.get("metadata")
        labels = meta.get("labels") if isinstance(meta, dict) else None
        return labels if isinstance(labels, dict) else {}

    @property
    def gpu_templates(self) -> list[PodTemplate]:
        return [t for t in self.templates if t.gpus_per_pod]

    @property
    def total_gpus(self) -> int:
        return sum(t.gpus_per_pod * t.ref.replicas for t in self.templates)

    @property
    def is_gpu(self) -> bool:
        return any(t.gpus_per_pod for t in self.templates)

    def gpus_by_resource(self) -> dict[str, int]:
        """Accelerator units per resource (DRA: per device class) over the workload's pods."""
        totals: dict[str, int] = {}
        for t in self.templates:
            for resource, count in t.effective_gpus.items():
                totals[resource] = totals.get(resource, 0) + count * t.ref.replicas
        return totals

    def pod_count(self) -> int:
        return sum(t.ref.replicas for t in self.templates)


def effective_requests(containers: Iterable[Container],
                       amounts: Callable[[Container], dict[str, Any]]) -> dict[str, Decimal]:
    """A pod's effective request per resource, by the kubelet's rule.

    App containers and native sidecars (init containers with ``restartPolicy: Always``) run
    together, so their requests add up.  Each regular init container runs alone, but beside
    the sidecars started before it.  The pod needs the larger of the two phases.
    """
    containers = list(containers)
    if not any(c.is_init for c in containers):  # the common case: the sum of the app containers
        total: dict[str, Decimal] = {}
        for c in containers:
            for k, v in amounts(c).items():
                total[k] = total.get(k, 0) + v
        return total
    app: dict[str, Decimal] = {}
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for c in containers:
        values = amounts(c)
        if not values:
            continue
        if not c.is_init:
            for k, v in values.items():
                app[k] = app.get(k, Decimal(0)) + Decimal(v)
        elif c.is_sidecar:
            for k, v in values.items():
                sidecars[k] = sidecars.get(k, Decimal(0)) + Decimal(v)
            for k, v in sidecars.items():
                init_peak[k] = max(init_peak.get(k, Decimal(0)), v)
        else:
            for k in set(values) | set(sidecars):
                running = Decimal(values.get(k, 0)) + sidecars.get(k, Decimal(0))
                init_peak[k] = max(init_peak.get(k, Decimal(0)), running)
    out: dict[str, Decimal] = {}
    for k in set(app) | set(sidecars) | set(init_peak):
        out[k] = max(app.get(k, Decimal(0)) + sidecars.get(k, Decimal(0)), init_peak.get(k, Decimal(0)))
    return out


def _container_gpus(body: dict, accelerators: Accelerators) -> tuple[dict[str, int], dict[str, Profile]]:
    """Accelerator units a container asks for, per resource name, with each resource's profile.

    The limit counts when present (limits alone imply requests; templates carry no
    defaulted request), else the request.  Fractions round up here: the count is for
    budgets and scheduling, while ``gpu-request-shape`` reports the fraction itself.
    """
    resources = body.get("resources")
    if not isinstance(resources, dict):
        return {}, {}
    out: dict[str, int] = {}
    found: dict[str, Any] = {}
    for section in ("requests", "limits"):  # limits last: they win
        values = resources.get(section)
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            if isinstance(name, str) and accelerators.is_accelerator(name):
                found[name] = raw
    if not found:
        return {}, {}
    profiles: dict[str, Profile] = {}
    for name, raw in found.items():
        profile = accelerators.profile_for(name, resources=resources)
        amount = quantity.parse(raw)
        if profile is not None and amount is not None and amount > 0:
            out[name] = math.ceil(amount)
            profiles[name] = profile
    return out, profiles


def build_view(obj: dict, kind: KindSpec, accelerators: Accelerators, workload_class: str, kind_class: str = "",
               namespace: str | None = None, claims: ClaimSource | None = None) -> WorkloadView:
    """Find every pod template of ``obj`` (a working copy) and the accelerators each container asks for.

    ``claims`` resolves DRA ResourceClaimTemplates/ResourceClaims (the webhook's cached watch,
    or the audit's input documents); without it a pod's claims are reported as unresolved.
    """
    templates: list[PodTemplate] = []
    namespace = namespace or _object_namespace(obj)
    for ref in kind.locate(obj):
        spec = get_path(obj, ref.spec_path)
        if not isinstance(spec, dict):
            continue
        containers = []
        for list_name in ("containers", "initContainers"):
            for i, body in dicts(spec.get(list_name)):
                gpus, profiles = _container_gpus(body, accelerators)
                containers.append(Container(i, list_name, body, ref.spec_path, gpus, profiles))
        for key in ref.container_keys:  # single-container keys (KServe's predictor.model ...)
            body = spec.get(key)
            if isinstance(body, dict):
                gpus, profiles = _container_gpus(body, accelerators)
                containers.append(Container(None, key, body, ref.spec_path, gpus, profiles))
        template = PodTemplate(ref, spec, obj, containers)
        if spec.get("resourceClaims"):
            attach_claims(template, namespace, accelerators, claims)
        templates.append(template)
    return WorkloadView(obj, kind, workload_class, templates, kind_class or workload_class, accelerators)


def _object_namespace(obj: dict) -> str | None:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ns if isinstance(ns, str) and ns else None
