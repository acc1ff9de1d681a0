"""Kinds an admin adds by configuration (the config's ``kinds:``), and the structural adapter for the rest.

A configured kind is a ``KindSpec`` like any family's: its pod templates are where the admin says, or found
by structure (``gpuguard.workloads.structural``); its class is what it is for; its deadline, TTL and retry
fields, gang semantics and scale subresource are the admin's to name.  ``structural_kind`` is the same
adapter for a kind nobody described: the engine uses it only to count what an unknown kind asks for, so
that it is reported ("not fully checked: unknown kind with N accelerators") instead of passed in silence.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuguard.workloads.kinds.spec import Gang, JobFields, KindSpec, Locate, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, get_path
from gpuguard.workloads.structural import find_pod_specs, is_pod_spec, schema_holds_pod_spec


def parse_path(dotted: str) -> Path:
    """``spec.roles.0.template`` -> ``("spec", "roles", 0, "template")``: digits are list indices."""
    return tuple(int(part) if part.isdigit() else part for part in dotted.split(".") if part)


def structural_locate(obj: dict) -> Iterator[TemplateRef]:
    """Every PodSpec under the object's ``spec``, found by structure, with the count beside it (else 1)."""
    for found in find_pod_specs(obj):
        yield TemplateRef(found.role, found.spec_path, found.meta_path, found.replicas)


def _given_locate(templates: tuple[tuple[Path, Path | None], ...]) -> Locate:
    """Templates at the admin's paths: a PodSpec there is used as is, a template ({metadata, spec}) by its spec."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        for path, replicas_path in templates:
            value = get_path(obj, path)
            role = next((str(p) for p in reversed(path) if isinstance(p, str) and p != "template"), "pod")
            replicas = count(get_path(obj, replicas_path)) if replicas_path else 1
            if is_pod_spec(value):
                yield TemplateRef(role, path, None, replicas)
            elif isinstance(value, dict):
                yield TemplateRef(role, (*path, "spec"), (*path, "metadata"), replicas)

    return locate


@dataclass(frozen=True)
class KindDeclaration:
    """One ``kinds:`` entry of the config, dotted paths as the admin writes them."""

    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    workload_class: str
    templates: tuple[tuple[str, str | None], ...] = ()  # (template path, replicas path)
    deadline: str | None = None
    ttl: str | None = None
    backoff: str | None = None
    gang: bool = False
    scale_replicas: str | None = None


def _path(dotted: str | None) -> Path | None:
    return parse_path(dotted) if dotted else None


def configured_kind(entry: KindDeclaration) -> KindSpec:
    """The ``KindSpec`` of one ``kinds:`` entry of the config."""
    given = tuple((parse_path(p), _path(r)) for p, r in entry.templates)
    fields = JobFields(ttl=_path(entry.ttl), deadline=_path(entry.deadline), backoff=_path(entry.backoff))
    return KindSpec(entry.group, entry.kind, entry.plural, entry.versions, entry.workload_class,
                    _given_locate(given) if given else structural_locate,
                    job=fields if (entry.ttl or entry.deadline or entry.backoff) else None,
                    gang=Gang() if entry.gang else None, scale_replicas=_path(entry.scale_replicas))


def structural_kind(group: str, kind: str, plural: str = "", versions: tuple[str, ...] = ()) -> KindSpec:
    """A kind nobody described, read by structure alone (to count what it asks for, never to mutate it)."""
    return KindSpec(group, kind, plural, versions, "training", structural_locate)


def unknown_pod_kinds(crds: Iterable[Any], known: Callable[[str, str], bool]) -> tuple[list[KindSpec], list[str]]:
    """The custom resource kinds ``known`` doesn't describe whose served storage version's schema holds a PodSpec,
    as structural ``KindSpec``s in that version; and the ones whose open schemas can't say ("Kind (group)").
    The cluster shells (``audit --cluster``, the scan) list them, so that an object asking for accelerators is
    reported as an unknown kind rather than passed in silence."""
    found: list[KindSpec] = []
    unreadable: list[str] = []
    for crd in crds:
        spec = crd.get("spec") if isinstance(crd, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        names, group = spec.get("names") or {}, spec.get("group")
        kind, plural = names.get("kind"), names.get("plural")
        if not (isinstance(group, str) and isinstance(kind, str) and isinstance(plural, str)) or known(group, kind):
            continue
        version = next((v for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("served")
                        and v.get("storage") and isinstance(v.get("name"), str)), None)
        if version is None:
            continue
        holds = schema_holds_pod_spec(((version.get("schema") or {}).get("openAPIV3Schema")) or {})
        if holds is None:
            unreadable.append(f"{kind} ({group})")
        elif holds:
            found.append(structural_kind(group, kind, plural, (version["name"],)))
    return found, sorted(unreadable)
