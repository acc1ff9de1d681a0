"""shared-rwo-claim: a ReadWriteOnce claim can't serve pods on several nodes.

A ReadWriteOnce volume attaches to one node: the pods of a multi-pod workload (a Job with parallelism,
a PyTorchJob's master and workers, a Deployment's replicas) that mount the same such claim all start
only where they land on that node; the others hang in ContainerCreating (``Multi-Attach error``) while
the pods that did start hold their GPUs.  A ReadWriteOncePod claim serves one pod, full stop.

The claim's access modes are read from the input (a PersistentVolumeClaim in the same manifests, a
fixture's ``objects.yaml``) or, in the webhook, from the cluster (cached reads made before the review,
``gpuguard.webhook.objects``).  A claim whose modes can't be read (not in the input, not found) is not
judged but said: a "not fully checked" warning naming it.  Pods
are those the view runs at once; claims a controller makes per pod (StatefulSet ``volumeClaimTemplates``,
generic ephemeral volumes) are each pod's own and never shared.  Where the pods' accelerators can't fit on
one node (the largest eligible node of the inventory, else the profile's ``maxPerNode``) some pods surely
never start: denied; where they could, nothing keeps them together: a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.paths import Path
from gpuguard.workloads.view import PodTemplate, WorkloadView

MULTI_NODE = frozenset({"ReadWriteMany", "ReadOnlyMany"})
FIX = "use ReadWriteMany, one claim per pod (claim templates) or object storage"


class Settings(PolicySettings):
    pass


@dataclass
class _Use:
    """The pods that mount one claim."""

    path: Path  # the first volume naming it
    templates: list[tuple[PodTemplate, int]] = field(default_factory=list)

    @property
    def pods(self) -> int:
        return sum(n for _, n in self.templates)


def _uses(view: WorkloadView) -> dict[str, _Use]:
    """Claim name -> the templates (and their pods at once) whose pods mount it."""
    out: dict[str, _Use] = {}
    running = {id(t): n for t, n in view.running_templates()}
    shared = _controller_shared(view)
    for template in view.templates:
        n = running.get(id(template), 0)
        if n <= 0:
            continue
        names: dict[str, Path] = dict(shared)
        for path, volume in template.volume_entries():
            source = volume.get("persistentVolumeClaim")
            name = source.get("claimName") if isinstance(source, dict) else None
            if isinstance(name, str) and name:
                names.setdefault(name, path)
        for name, path in names.items():
            out.setdefault(name, _Use(path)).templates.append((template, n))
    return out


def _controller_shared(view: WorkloadView) -> dict[str, Path]:
    """Existing claims the kind's controller mounts into every pod (Volcano ``spec.volumes[].volumeClaimName``)."""
    claims = view.kind.volume_claims
    if claims is None or claims.style != "volcano-volumes":
        return {}
    out: dict[str, Path] = {}
    for i, entry in enumerate(view.controller_claim_entries()):
        name = entry.get("volumeClaimName")
        if isinstance(name, str) and name:
            out.setdefault(name, claims.path + (i,))
    return out


def _modes(view: WorkloadView, name: str) -> frozenset[str] | None:
    claim = view.read_object("", "PersistentVolumeClaim", view.namespace, name) if view.read_object else None
    spec = claim.get("spec") if isinstance(claim, dict) else None
    modes = spec.get("accessModes") if isinstance(spec, dict) else None
    if not isinstance(modes, list) or not modes:
        return None
    return frozenset(m for m in modes if isinstance(m, str))


def _pinned(use: _Use) -> bool:
    """Every pod is placed on one named node (``nodeName``, or a hostname nodeSelector): they share it."""
    nodes = set()
    for template, _ in use.templates:
        selector = template.spec.get("nodeSelector")
        host = selector.get("kubernetes.io/hostname") if isinstance(selector, dict) else None
        nodes.add(template.spec.get("nodeName") or host)
    return len(nodes) == 1 and None not in nodes


def _too_big(view: WorkloadView, use: _Use) -> tuple[int, str, int] | None:
    """(devices, resources, the most one node has) where the pods' accelerators can't all be on one node."""
    by_profile: dict[str, tuple[int, set[str]]] = {}
    for template, n in use.templates:
        for name, count in template.effective_gpus.items():
            profile = template.profile_of.get(name)
            if profile is None:
                continue
            total, names = by_profile.get(profile.name, (0, set()))
            by_profile[profile.name] = (total + count * n, names | {name})
    profiles = {p.name: p for t, _ in use.templates for p in t.profiles}
    for profile_name, (total, names) in by_profile.items():
        cap = _cap(view, profiles[profile_name].max_per_node, sorted(names))
        if cap is not None and total > cap:
            return total, ", ".join(sorted(names)), cap
    return None


def _cap(view: WorkloadView, profile_cap: int | None, names: list[str]) -> int | None:
    if not view.inventory.known:
        return profile_cap
    groups = view.inventory.eligible(n for n in names if "/" in n)
    if not groups or any(not g.shape_known for g in groups) or any("/" not in n for n in names):
        return None
    return int(max(sum((g.amount(n) or Decimal(0) for n in names), Decimal(0)) for g in groups))


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    if not view.is_gpu or view.kind.per_node:
        return
    for name, use in _uses(view).items():
        pods = use.pods
        if pods <= 1:
            continue
        modes = _modes(view, name)
        if modes is None:  # not in the input, not found or not readable in the cluster: said, never passed
            yield Finding(use.path, f"not fully checked: {pods} pods mount claim {name!r}, whose access modes "
                          "could not be read (if ReadWriteOnce, pods on other nodes never start)",
                          "include the claim in the input, or create it before the workload", advisory=True)
            continue
        if modes & MULTI_NODE:
            continue
        if "ReadWriteOncePod" in modes:
            yield Finding(use.path, f"{pods} pods mount ReadWriteOncePod claim {name!r}: only one can ever start",
                          FIX)
            continue
        if "ReadWriteOnce" not in modes or _pinned(use):
            continue
        big = _too_big(view, use)
        if big is not None:
            devices, resources, cap = big
            yield Finding(use.path, f"{pods} pods mount ReadWriteOnce claim {name!r}, attached to one node, but their "
                          f"{devices} {resources} exceed the {cap} a node has: the others never start", FIX)
        else:
            yield Finding(use.path, f"{pods} pods mount ReadWriteOnce claim {name!r}, attached to one node: pods "
                          "placed elsewhere hang in ContainerCreating (Multi-Attach error)", FIX, advisory=True)


POLICY = ValidatingPolicy(
    id="shared-rwo-claim",
    title="No ReadWriteOnce claim shared across nodes",
    settings_model=Settings,
    run=validate,
    description="Denies a multi-pod GPU workload whose pods mount one ReadWriteOncePod claim, or one ReadWriteOnce "
    "claim where their accelerators can't fit on one node (the largest eligible node, else the profile's "
    "`maxPerNode`); warns where they merely might land on several. Access modes come from the claim in the input "
    "or the cluster; a claim that can't be read is reported not fully checked (a warning), and per-pod claims "
    "(claim templates) are fine.",
    rationale="A ReadWriteOnce volume attaches to one node: pods elsewhere hang in ContainerCreating with a "
    "Multi-Attach error while the pods that started hold their GPUs.",
    cpu_scope=accelerator_objects_only,
)
