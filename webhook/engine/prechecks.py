"""The invalid-quantity check: resource quantities in an object that are not usable numbers.

``gpuguard.workloads.quantity.parse`` turns a malformed or out-of-range quantity into ``None`` so that no
policy can raise on it — but a GPU limit of ``"1e800000"`` read as "missing" would let the
object through as if it asked for no GPU at all.  So before any policy looks at an object,
the engine asks :func:`new_findings` for every quantity the policies read (container requests
and limits, pod overhead and pod-level resources, emptyDir size limits) in every pod template
of a kind gpuguard checks, and denies the object with one violation per bad value.  It is an
engine step, not a policy: no action or setting can turn it off, since nothing after it could
judge the object.  Every shell (webhook, evaluate, audit, test, fix) gets it from the engine.

A missing value (``null``) is "unset" for ``cpu``, ``memory`` and the other native resources (a default may
fill it), but not for an extended resource that may be an accelerator (``may_be_accelerator``: a vendor-domain
name that is not a NIC, FUSE ... device): ``nvidia.com/gpu: null`` read as "no GPU" would admit a GPU pod as
CPU, and the apiserver's own reading of it (zero) is not what its author meant, so it is refused like a bad
quantity.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpuguard.workloads import kinds, quantity
from gpuguard.workloads.accelerators import may_be_accelerator
from gpuguard.workloads.paths import Path

POLICY_ID = "invalid-quantity"
TITLE = "Resource quantities are numbers Kubernetes can use"
FIX = "write a quantity Kubernetes accepts, such as 1, 500m, 16Gi or 100M"
NULL_ACCELERATOR = "an accelerator count must be a number (leave the resource out for none)"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
MAX_FINDINGS = 20  # enough to fix the object; a hostile one with thousands gets a bounded answer
# What gpuguard judges of one object.  Every policy walks each pod template and container, so the
# engine's time grows with their count (about 140 us per JobSet replicatedJob, 30 us per container:
# bench/hostile.py); these keep the worst object under the 50 ms engine budget, far above real ones.
MAX_POD_TEMPLATES = 300
MAX_CONTAINERS = 1_000


@dataclass(frozen=True)
class InvalidQuantity:
    """One bad value: where it is, what it was, and why it is refused."""

    path: Path
    value: Any
    reason: str

    @property
    def where(self) -> str:
        return _dotted(self.path)

    @property
    def problem(self) -> str:
        shown = f'"{self.value[:40]}{"…" if len(self.value) > 40 else ""}"' if isinstance(self.value, str) \
            else "null" if self.value is None else repr(self.value)[:40]
        return f"{shown} is not a usable quantity: {self.reason}"


def _dotted(path: Path) -> str:
    """``spec.containers[0].resources.limits[nvidia.com/gpu]``: keys with dots or slashes bracketed."""
    out = ""
    for step in path:
        if isinstance(step, int) or "." in step or "/" in step:
            out += f"[{step}]"
        else:
            out += f".{step}" if out else step
    return out


def _resource_map(values: Any, path: Path) -> Iterator[InvalidQuantity]:
    if not isinstance(values, dict):
        return
    for name, value in values.items():
        if value is None:
            if isinstance(name, str) and may_be_accelerator(name):
                yield InvalidQuantity(path + (name,), value, NULL_ACCELERATOR)
            continue
        reason = quantity.problem(value)
        if reason:
            yield InvalidQuantity(path + (str(name),), value, reason)


def _resources(resources: Any, path: Path) -> Iterator[InvalidQuantity]:
    if isinstance(resources, dict):
        for section in ("requests", "limits"):
            yield from _resource_map(resources.get(section), path + (section,))


def _pod_spec(spec: dict, path: Path) -> Iterator[InvalidQuantity]:
    for list_name in _CONTAINER_LISTS:
        containers = spec.get(list_name)
        if isinstance(containers, list):
            for i, container in enumerate(containers):
                if isinstance(container, dict):
                    yield from _resources(container.get("resources"), path + (list_name, i, "resources"))
    yield from _resources(spec.get("resources"), path + ("resources",))
    yield from _resource_map(spec.get("overhead"), path + ("overhead",))
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        for i, volume in enumerate(volumes):
            empty_dir = volume.get("emptyDir") if isinstance(volume, dict) else None
            size = empty_dir.get("sizeLimit") if isinstance(empty_dir, dict) else None
            if size is not None and (reason := quantity.problem(size)):
                yield InvalidQuantity(path + ("volumes", i, "emptyDir", "sizeLimit"), size, reason)


def _clean_map(values: Any) -> bool:
    if isinstance(values, dict):
        for name, value in values.items():
            if value is None:
                if isinstance(name, str) and may_be_accelerator(name):
                    return False
            elif quantity.problem(value) is not None:
                return False
    return True


def _clean_resources(resources: Any) -> bool:
    return not isinstance(resources, dict) or (
        _clean_map(resources.get("requests")) and _clean_map(resources.get("limits")))


def _clean(spec: dict) -> bool:
    """Whether a PodSpec has no bad quantity: the common case, answered without building a path or a finding."""
    for list_name in _CONTAINER_LISTS:
        containers = spec.get(list_name)
        if isinstance(containers, list):
            for container in containers:
                if isinstance(container, dict) and not _clean_resources(container.get("resources")):
                    return False
    if not _clean_resources(spec.get("resources")) or not _clean_map(spec.get("overhead")):
        return False
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        for volume in volumes:
            empty_dir = volume.get("emptyDir") if isinstance(volume, dict) else None
            size = empty_dir.get("sizeLimit") if isinstance(empty_dir, dict) else None
            if size is not None and quantity.problem(size) is not None:
                return False
    return True


def find(obj: Any) -> list[InvalidQuantity]:
    """Every invalid quantity in the pod templates of ``obj`` (at most ``MAX_FINDINGS``)."""
    if not isinstance(obj, dict):
        return []
    kind = kinds.lookup(obj.get("apiVersion"), obj.get("kind"))
    if kind is None:
        return []
    found: list[InvalidQuantity] = []
    for ref in kind.locate(obj):
        spec = kinds.get_path(obj, ref.spec_path)
        if isinstance(spec, dict) and not _clean(spec):
            for item in _pod_spec(spec, ref.spec_path):
                found.append(item)
                if len(found) >= MAX_FINDINGS:
                    return found
    return found


def located(obj: dict, kind: kinds.KindSpec) -> list[kinds.TemplateRef]:
    """``kind.locate(obj)``, at most one past ``MAX_POD_TEMPLATES``: read once per evaluation, before any walk
    that grows with the object, and handed to :func:`too_large`, the class reading and the view."""
    return list(itertools.islice(kind.locate(obj), MAX_POD_TEMPLATES + 1))


def too_large(obj: dict, kind: kinds.KindSpec, refs: Sequence[kinds.TemplateRef] | None = None) -> str | None:
    """Why ``obj`` has more pod templates or containers than gpuguard judges, or None.  ``refs``: :func:`located`."""
    containers = 0
    for templates, ref in enumerate(kind.locate(obj) if refs is None else refs, 1):
        if templates > MAX_POD_TEMPLATES:
            return f"it has more than {MAX_POD_TEMPLATES} pod templates, the most gpuguard judges (MAX_POD_TEMPLATES)"
        spec = kinds.get_path(obj, ref.spec_path)
        if isinstance(spec, dict):
            for list_name in _CONTAINER_LISTS:
                listed = spec.get(list_name)
                if isinstance(listed, list):
                    containers += len(listed)
        if containers > MAX_CONTAINERS:
            return f"it has more than {MAX_CONTAINERS} containers, the most gpuguard judges (MAX_CONTAINERS)"
    return None


def new_findings(obj: Any, old_object: Any = None) -> list[InvalidQuantity]:
    """The bad quantities ``obj`` brings in: on an UPDATE (``old_object``) not those it left unchanged."""
    found = find(obj)
    if found and isinstance(old_object, dict):
        old = {(f.path, repr(f.value)) for f in find(old_object)}
        found = [f for f in found if (f.path, repr(f.value)) not in old]
    return found
