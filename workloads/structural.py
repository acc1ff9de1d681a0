"""Pod specs found by their structure: the adapter for kinds no operator family describes.

Operators put pod templates anywhere: a list of roles, a worker template nested in a job spec, a template
inside each trial of a tuning run, a bare PodSpec under a key of their own, a map of named replica specs.
What they share is the PodSpec itself: a mapping whose ``containers`` is a list of container mappings, each
with an ``image`` (or at least a ``name`` and ``resources``).  This module finds those wherever they sit, so
that an unknown kind carrying accelerators is reported ("not fully checked: unknown kind with N
accelerators") rather than passed in silence, and so that an admin can add a kind by configuration with no
code: its templates are found here unless the admin names them.

How many pods a template makes is read from a count next to it (``replicas``, ``maxReplicas``,
``parallelism``, ``numWorkers`` …, beside the template or the PodSpec); where there is none, the count is
not known and 1 is what is certain — ``FoundSpec.counted`` says which.

Bounded: the walk visits at most ``MAX_NODES`` mappings and lists and ``MAX_DEPTH`` levels, and stops
descending at a PodSpec (a pod spec holds no pod spec).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gpuguard.workloads.paths import Path

MAX_DEPTH = 24
MAX_NODES = 20000
# Counts an operator keeps next to a template, most pods first (an autoscaling maximum over the current size).
REPLICA_KEYS = ("maxReplicas", "replicas", "numReplicas", "parallelism", "numWorkers", "workers", "numNodes", "nodes",
                "instances", "size", "count",
                "minReplicas")
# Keys under which a template holds its PodSpec and metadata (``template: {metadata, spec}``).
_SPEC_KEY, _META_KEY = "spec", "metadata"


@dataclass(frozen=True)
class FoundSpec:
    """One PodSpec: where it is, where its metadata is (``None``: a bare PodSpec), how many pods it makes."""

    spec_path: Path
    meta_path: Path | None
    replicas: int
    counted: bool  # whether ``replicas`` was read next to it (else 1, what is certain)
    role: str


def is_pod_spec(value: Any) -> bool:
    """A mapping whose ``containers`` is a non-empty list of container mappings."""
    if not isinstance(value, dict):
        return False
    containers = value.get("containers")
    if not isinstance(containers, list) or not containers:
        return False
    return all(isinstance(c, dict) and (isinstance(c.get("image"), str)
                                        or (isinstance(c.get("name"), str) and isinstance(c.get("resources"), dict)))
               for c in containers)


def _count(holder: Any) -> int | None:
    if not isinstance(holder, dict):
        return None
    for key in REPLICA_KEYS:
        value = holder.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def find_pod_specs(obj: dict, root: Path = ("spec",)) -> list[FoundSpec]:
    """Every PodSpec under ``root`` of ``obj`` (the object's ``spec`` by default), in document order."""
    start: Any = obj
    for key in root:
        start = start.get(key) if isinstance(start, dict) else None
    found: list[FoundSpec] = []
    budget = [MAX_NODES]

    def walk(value: Any, path: Path, parents: tuple[Any, ...]) -> Iterator[None]:
        if budget[0] <= 0 or len(path) - len(root) > MAX_DEPTH:
            return
        budget[0] -= 1
        if is_pod_spec(value):
            found.append(_found(path, parents))
            return
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, str) and isinstance(child, dict | list):
                    yield from walk(child, (*path, key), (*parents, value))
        elif isinstance(value, list):
            for i, child in enumerate(value):
                if isinstance(child, dict | list):
                    yield from walk(child, (*path, i), (*parents, value))

    for _ in walk(start, tuple(root), ()):
        pass
    return found


def _found(path: Path, parents: tuple[Any, ...]) -> FoundSpec:
    """A PodSpec at ``path``: its metadata beside it when it is a template's ``spec``; its count beside the
    template or the PodSpec (the nearest mapping up to two levels out that has one)."""
    parent = parents[-1] if parents else None
    meta_path: Path | None = None
    template_level = len(parents) - 1
    if path and path[-1] == _SPEC_KEY and isinstance(parent, dict) and isinstance(parent.get(_META_KEY), dict | None):
        meta_path = (*path[:-1], _META_KEY)
        template_level = len(parents) - 2
    count: int | None = None
    for level in (template_level, template_level - 1):
        if 0 <= level < len(parents):
            count = _count(parents[level])
            if count is not None:
                break
    role = next((str(p) for p in reversed(path) if isinstance(p, str) and p not in (_SPEC_KEY, "template")), "pod")
    return FoundSpec(path, meta_path, count if count is not None else 1, count is not None, role)


def schema_holds_pod_spec(schema: Any, depth: int = 0) -> bool | None:
    """Whether a CRD version's OpenAPI schema holds a PodSpec: a ``containers`` array whose items have an
    ``image``, anywhere.  ``None``: the schema is open (``x-kubernetes-preserve-unknown-fields`` with no
    properties), so nothing can be told from it."""
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return False
    props = schema.get("properties")
    if not isinstance(props, dict):
        items = schema.get("items") or schema.get("additionalProperties")
        if isinstance(items, dict):
            return schema_holds_pod_spec(items, depth + 1)
        return None if schema.get("x-kubernetes-preserve-unknown-fields") and depth <= 1 else False
    containers = props.get("containers")
    if isinstance(containers, dict) and containers.get("type") == "array":
        item = containers.get("items")
        if isinstance(item, dict) and "image" in (item.get("properties") or {}):
            return True
    open_ = False
    for child in props.values():
        found = schema_holds_pod_spec(child, depth + 1)
        if found:
            return True
        open_ = open_ or found is None
    return None if open_ else False
