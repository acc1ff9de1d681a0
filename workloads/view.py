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
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from workloads import quantity
from workloads.kinds import KindSpec, TemplateRef
from workloads.paths import Path, child_dict, dicts, dotted, get_path

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
    gpus: dict[str, int] = field(default_factory=dict)  # resource -> whole GPUs asked for

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
        return sum(self.gpus.values())

    @property
    def is_init(self) -> bool:
        return self.list_name == "initContainers"

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

    @property
    def spec_path(self) -> Path:
        return self.ref.spec_path

    @property
    def where(self) -> str:
        return dotted(self.ref.spec_path)

    @cached_property
    def gpus_per_pod(self) -> int:
        """A pod's effective GPU request: max(sum of app containers, largest init container).

        Cached: policies never change GPU counts, and every policy asks.
        """
        app = sum(c.gpu_count for c in self.containers if not c.is_init)
        init = max((c.gpu_count for c in self.containers if c.is_init), default=0)
        return max(app, init)

    @cached_property
    def gpu_containers(self) -> list[Container]:
        return [c for c in self.containers if c.gpus]

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
        totals: dict[str, int] = {}
        for t in self.templates:
            for c in t.containers:
                if c.is_init:
                    continue
                for resource, count in c.gpus.items():
                    totals[resource] = totals.get(resource, 0) + count * t.ref.replicas
        return totals

    def pod_count(self) -> int:
        return sum(t.ref.replicas for t in self.templates)


def _container_gpus(body: dict, is_gpu: Callable[[str], bool]) -> dict[str, int]:
    """GPUs a container asks for, per GPU resource name.

    The limit counts when present (limits alone imply requests; templates carry no
    defaulted request), else the request.  Fractions round up here: the count is for
    budgets and scheduling, while ``gpu-request-shape`` reports the fraction itself.
    """
    resources = body.get("resources")
    if not isinstance(resources, dict):
        return {}
    out: dict[str, int] = {}
    for section in ("requests", "limits"):  # limits last: they win
        values = resources.get(section)
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            if isinstance(name, str) and is_gpu(name):
                amount = quantity.parse(raw)
                if amount is not None and amount > 0:
                    out[name] = math.ceil(amount)
    return out


def build_view(obj: dict, kind: KindSpec, is_gpu: Callable[[str], bool], workload_class: str,
               kind_class: str = "") -> WorkloadView:
    """Find every pod template of ``obj`` (a working copy) and the GPUs each container asks for."""
    templates: list[PodTemplate] = []
    for ref in kind.locate(obj):
        spec = get_path(obj, ref.spec_path)
        if not isinstance(spec, dict):
            continue
        containers = [
            Container(i, list_name, body, ref.spec_path, _container_gpus(body, is_gpu))
            for list_name in ("containers", "initContainers")
            for i, body in dicts(spec.get(list_name))
        ]
        containers += [Container(None, key, spec[key], ref.spec_path, _container_gpus(spec[key], is_gpu))
                       for key in ref.container_keys if isinstance(spec.get(key), dict)]
        templates.append(PodTemplate(ref, spec, obj, containers))
    return WorkloadView(obj, kind, workload_class, templates, kind_class or workload_class)
