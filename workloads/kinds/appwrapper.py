"""AppWrapper (``workload.codeflare.dev``): components that wrap any object, admitted by Kueue as one.

Each component's pod sets say where its pod templates are (``path``, or ``podPath`` in older
versions), as a path written in data, which CEL can't follow (the webhook is called for every
AppWrapper); a component without pod sets is read through the kind table, for kinds gpuguard knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from gpuguard.workloads.kinds.spec import KindSpec, Locate, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, dicts, get_path

# The kind table's lookup by apiVersion and kind (given by the table, which holds this kind too).
Lookup = Callable[[Any, Any], "KindSpec | None"]


def _parse_pod_set_path(text: str) -> Path | None:
    """AppWrapper pod-set paths (``template.spec.template``, ``...workerGroupSpecs[0].template``)."""
    steps: list[str | int] = []
    for part in text.split("."):
        name, _, rest = part.partition("[")
        if name:
            steps.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            if not index.isdigit():
                return None
            steps.append(int(index))
            rest = rest.lstrip("[")
    return tuple(steps) or None


def _wrapped(base: Path, wrapped: Any, lookup: Lookup, i: int) -> Iterator[TemplateRef]:
    """The templates of a component's wrapped object, as the kind table finds them."""
    spec = lookup(wrapped.get("apiVersion"), wrapped.get("kind")) if isinstance(wrapped, dict) else None
    if spec is None or spec.runtime is not None:
        return
    for ref in spec.locate(wrapped):
        yield TemplateRef(f"component-{i}-{ref.role}", base + ("template",) + ref.spec_path,
                          None if ref.meta_path is None else base + ("template",) + ref.meta_path,
                          ref.replicas, ref.container_keys, ref.knative)


def _locate(lookup: Lookup) -> Locate:
    def locate(obj: dict) -> Iterator[TemplateRef]:
        for i, component in dicts(get_path(obj, ("spec", "components"))):
            base: Path = ("spec", "components", i)
            pod_sets = component.get("podSets")
            if not (isinstance(pod_sets, list) and pod_sets):
                yield from _wrapped(base, component.get("template"), lookup, i)
                continue
            for j, pod_set in dicts(pod_sets):
                path = _parse_pod_set_path(str(pod_set.get("path") or pod_set.get("podPath") or ""))
                if path is not None:
                    yield TemplateRef(f"component-{i}-{j}", base + path + ("spec",), base + path + ("metadata",),
                                      count(pod_set.get("replicas")))

    return locate


def appwrapper(lookup: Lookup) -> KindSpec:
    """The AppWrapper entry, reading wrapped objects through ``lookup`` (the table it is part of)."""
    return KindSpec("workload.codeflare.dev", "AppWrapper", "appwrappers", ("v1beta2",), "training", _locate(lookup))
