"""Containers as policies see them, whatever shape the kind writes them in.

Most kinds hold ordinary Kubernetes containers (``Container``).  A Spark application's
driver and executor specs are each a pod *and* its main container in Spark's terms
(``SparkContainer``): the adapter reads ``cores``/``memory``/``gpu`` (or their ``sparkConf``
forms) as the requests and limits the operator will write, and writes defaults back into
those fields, so a policy asks the same questions of both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, ClassVar

from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import NO_SIZE, Accelerators, Profile, Size
from gpuguard.workloads.kinds.spark import operator as spark
from gpuguard.workloads.paths import Path, child_dict, dicts


@dataclass
class Container:
    """One container (or init container) of a pod template."""

    index: int | None  # None: a single container held under its own key (KServe's predictor.model)
    list_name: str  # containers | initContainers | sidecars | the key of a single-container field
    body: dict
    spec_path: Path
    gpus: dict[str, int] = field(default_factory=dict)  # extended resource -> accelerator units asked for
    profiles: dict[str, Profile] = field(default_factory=dict)  # extended resource -> its profile
    # DRA devices of the pod's claims this container is the first to reference: device class -> count
    claim_devices: dict[str, int] = field(default_factory=dict)
    claim_profiles: dict[str, Profile] = field(default_factory=dict)
    # Where the list is in the PodSpec, when not at ``list_name`` (Argo's ``containerSet.containers``).
    list_path: Path = ()

    # What to tell a user who must set this container's memory limit.
    memory_setting: ClassVar[str] = "resources.limits.memory"
    # Native resources the kind lets a user set for this container (None: any).
    settable: ClassVar[frozenset[str] | None] = None

    @property
    def name(self) -> str:
        name = self.body.get("name")
        return name if isinstance(name, str) else (self.list_name if self.index is None else f"#{self.index}")

    @property
    def path(self) -> Path:
        if self.index is None:
            return self.spec_path + (self.list_name,)
        return self.spec_path + (self.list_path or (self.list_name,)) + (self.index,)

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

    def pod_body(self) -> dict:
        """The container as it will be in the pod (Kubernetes' Container shape)."""
        return self.body

    def declared(self, section: str, name: str) -> Any:
        """What the user set for ``name`` in ``section`` (requests|limits), ``None`` when unset: the
        value default-resources must not override."""
        return self.resource_value(section, name)

    def can_set_resources(self) -> bool:
        """Whether requests and limits can be added (not when ``resources`` is malformed: the
        apiserver's validation reports that)."""
        res = self.body.get("resources", {})
        if not isinstance(res, dict):
            return False
        return isinstance(res.get("requests"), dict | None) and isinstance(res.get("limits"), dict | None)

    def set_resource(self, section: str, name: str, value: str) -> bool:
        """Set ``resources.<section>.<name>``; whether anything changed."""
        resources = self.resources(create=True)
        part = child_dict(resources, section) if resources is not None else None
        if part is None or part.get(name) == value:
            return False
        part[name] = value
        return True

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


def container_gpus(body: dict, accelerators: Accelerators) -> tuple[dict[str, int], dict[str, Profile]]:
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


class SparkContainer(Container):
    """The main container of a Spark driver or executor pod, read from its SparkPodSpec.

    ``resources()`` is what the pod will get (Spark's defaults included: 1 core, ``1g`` heap
    plus overhead); ``declared()`` only what the user set, so default-resources fills the rest:
    the CPU request as ``coreRequest`` (a Kubernetes quantity that does not change Spark's task
    slots, as ``cores`` would), the memory as the ``memory`` heap that makes the sized pod once
    Spark adds its overhead.  Spark sets memory request = limit and has no ephemeral-storage field.
    """

    def __init__(self, role: str, body: dict, spec_path: Path, app: dict, accelerators: Accelerators):
        super().__init__(None, role, body, spec_path)
        self.app = app
        self.conf = spark.conf(app)
        self.gpus, self.profiles = container_gpus({"resources": self.resources()}, accelerators)

    @property
    def memory_setting(self) -> str:  # type: ignore[override]
        return f"{self.list_name}.memory (the JVM heap; the pod's limit adds memoryOverhead)"

    @property
    def name(self) -> str:
        return f"spark-kubernetes-{self.list_name}"

    @property
    def path(self) -> Path:
        return self.spec_path

    settable = frozenset({"cpu", "memory"})  # no ephemeral-storage field (only through a pod template)

    def pod_body(self) -> dict:
        body = {key: self.body[key] for key in ("env", "envFrom", "volumeMounts", "securityContext", "lifecycle")
                if key in self.body}
        return {"name": self.name, "image": self.body.get("image", self.app.get("image")), **body,
                "resources": self.resources()}

    def _first(self, *values: Any) -> Any:
        return next((v for v in values if v not in (None, "")), None)

    def _cpu(self, section: str) -> Any:
        role, conf = self.list_name, self.conf
        if section == "limits":
            return self._first(self.body.get("coreLimit"), conf.get(f"spark.kubernetes.{role}.limit.cores"))
        return self._first(self.body.get("coreRequest"), conf.get(f"spark.kubernetes.{role}.request.cores"),
                           self.body.get("cores"), conf.get(f"spark.{self.list_name}.cores"))

    def _heap(self) -> Decimal | None:
        return spark.jvm_bytes(self._first(self.body.get("memory"), self.conf.get(f"spark.{self.list_name}.memory")))

    def _pod_memory(self) -> Decimal:
        heap = self._heap()
        heap = heap if heap is not None else Decimal(2**30)  # Spark's default 1g
        overhead = spark.jvm_bytes(self._first(self.body.get("memoryOverhead"),
                                               self.conf.get(f"spark.{self.list_name}.memoryOverhead")))
        if overhead is None:
            overhead = max(heap * spark.overhead_factor(self.app), spark.MIN_OVERHEAD)
        return heap + overhead

    def resources(self, create: bool = False) -> dict | None:
        if create:
            return None  # written through set_resource
        memory = str(int(self._pod_memory()))
        requests: dict[str, Any] = {"cpu": self._cpu("requests") or 1, "memory": memory}
        limits: dict[str, Any] = {"memory": memory}
        if self._cpu("limits") is not None:
            limits["cpu"] = self._cpu("limits")
        asked = spark.gpu(self.body, self.list_name, self.conf)
        if asked is not None:
            limits[asked[0]] = asked[1]
        return {"requests": requests, "limits": limits}

    def declared(self, section: str, name: str) -> Any:
        if name == "cpu":
            return self._cpu(section)
        if name == "memory":
            heap = self._heap()
            return None if heap is None else str(int(self._pod_memory()))
        return None

    def can_set_resources(self) -> bool:
        return True

    def set_resource(self, section: str, name: str, value: str) -> bool:
        """Never below what Spark's defaults already give the pod (1 core, a ``1g`` heap)."""
        amount = quantity.parse(value)
        if amount is None or self.declared(section, name) is not None:
            return False
        effective = quantity.parse((self.resources() or {}).get(section, {}).get(name))
        if section == "requests" and effective is not None and amount <= effective:
            return False
        if name == "cpu":
            self.body["coreRequest" if section == "requests" else "coreLimit"] = value
            return True
        if name == "memory" and section == "requests":
            self.body["memory"] = spark.jvm_size(spark.heap_for(amount, spark.overhead_factor(self.app)))
            return True
        return False  # the memory limit follows the request; Spark has no ephemeral-storage setting
