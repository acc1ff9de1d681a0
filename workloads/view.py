"""The workload view: what the policies see of an object.

A policy never walks a raw object.  It gets a ``WorkloadView``: the kind, the workload class,
and every pod template with its containers and GPU counts already found.  The view holds
live references into the engine's working copy, so a mutating policy edits the object
through it, and the engine diffs the copy afterwards.

Everything here tolerates malformed input (nulls, wrong types, missing fields): an object
the apiserver would reject anyway must still get a decision, not an exception.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import KAI_SHARE, Accelerators, Profile, kai_share
from gpuguard.workloads.claims import ClaimSource, attach_claims
from gpuguard.workloads.containers import Container, container_gpus
from gpuguard.workloads.inventory import EMPTY_INVENTORY, Inventory
from gpuguard.workloads.kinds import POD_CONTAINER_LISTS, KindSpec, TemplateRef
from gpuguard.workloads.kinds.ray.serve import RayServe, read_demand
from gpuguard.workloads.kinds.spec import ListObjects, ReadObject, ServingGroup
from gpuguard.workloads.paths import Path, Replaced, child_dict, child_list, dicts, dotted, get_path, set_int_field
from gpuguard.workloads.shapes import shape_of

if TYPE_CHECKING:
    from gpuguard.workloads.lifecycle import ClassReading

__all__ = ["NEVER_PREEMPTING_KINDS", "WORKLOAD_CLASSES", "WORKLOAD_CLASS_LABEL", "Container", "PodTemplate",
           "WorkloadView", "build_view",
           "effective_requests"]


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
# tests / benchmarks.  ``gpuguard.workloads.lifecycle`` reads it, from the kind's purpose first.
WORKLOAD_CLASSES = ("training", "inference", "batch-inference", "notebook", "smoke-test")
# Kinds that run a pod on every matching node: a preempting priority would evict whatever runs there.
NEVER_PREEMPTING_KINDS = frozenset({"DaemonSet"})


@dataclass
class PodTemplate:
    """One pod template: its PodSpec, metadata and containers, inside the working copy."""

    ref: TemplateRef
    spec: dict
    root: dict
    containers: list[Container]
    # DRA devices of the pod's claims, device class -> count (each claim counted once per pod)
    claim_devices: dict[str, int] = field(default_factory=dict)
    # the fewest devices per class its claims need for sure (exact counts; of alternatives, the smallest when all
    # are of one class; never allocationMode All): what "no node can ever hold it" is judged on
    claim_floor: dict[str, int] = field(default_factory=dict)
    shares_claims: bool = False  # names a ResourceClaim (shared by every pod naming it), not only templates
    claim_profiles: dict[str, Profile] = field(default_factory=dict)
    # claims gpuguard could not read: (path, message); reported as warnings, never counted as 0 silently
    unresolved_claims: list[tuple[Path, str]] = field(default_factory=list)
    # the subset that leaves the pod's accelerators unknown: the engine refuses it (failureMode closed)
    unjudged_claims: list[tuple[Path, str]] = field(default_factory=list)

    def node_selection(self) -> tuple[dict | None, list | None]:
        """The pod's own node choice: its ``nodeSelector`` and required nodeSelectorTerms (``None`` where absent)."""
        node_selector = self.spec.get("nodeSelector")
        affinity = self.spec.get("affinity")
        node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
        required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(node_affinity, dict) else None
        terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        return (node_selector if isinstance(node_selector, dict) else None,
                terms if isinstance(terms, list) else None)

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
        # An inline template's ``resources`` are its one container's (a NIMService), not the pod's.
        res = self.spec.get("resources") if shape_of(self.ref).pod_level_resources else None
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
        key = self.ref.meta_path[-1]
        if create:
            return child_dict(parent, key) if isinstance(key, str) else None
        value = parent.get(key) if isinstance(parent, dict) else None
        return value if isinstance(value, dict) else None

    def labels(self) -> dict:
        meta = self.metadata()
        labels = meta.get("labels") if meta else None
        return labels if isinstance(labels, dict) else {}

    @property
    def adapted(self) -> bool:
        """The kind writes this pod its own way (Spark's role specs, Argo's container templates)."""
        ref = self.ref
        return shape_of(ref).adapted or ref.container_lists != POD_CONTAINER_LISTS or bool(ref.container_keys)

    def pod_spec(self) -> dict:
        """The PodSpec the pod will get, as far as gpuguard knows it: the template itself for most
        kinds; for adapted ones, its pod fields with the containers and volumes gathered into the
        usual lists (what admins' CEL rules read as ``podSpec``).  Read-only: a copy where adapted."""
        if not self.adapted:
            return self.spec
        keys = self.ref.container_keys + tuple(p[0] for p in self.ref.container_lists)
        out = {k: v for k, v in self.spec.items() if k not in keys and k not in ("volumes", "containerSet")}
        out["containers"] = [c.pod_body() for c in self.containers if not c.is_init]
        out["initContainers"] = [c.pod_body() for c in self.containers if c.is_init]
        out["volumes"] = list(self.volumes().values())
        return out

    def _volume_paths(self) -> tuple[Path, ...]:
        return self.ref.volume_paths or (self.ref.spec_path + ("volumes",),)

    def volumes(self) -> dict[str, dict]:
        """Volume name -> volume, for resolving mounts (every list the pod gets its volumes from)."""
        out: dict[str, dict] = {}
        for _, volume in self.volume_entries():
            if isinstance(volume.get("name"), str):
                out.setdefault(volume["name"], volume)  # the first list wins a name clash
        return out

    def volume_entries(self) -> Iterator[tuple[Path, dict]]:
        """(path, volume) of every volume the pod gets."""
        for path in self._volume_paths():
            for i, volume in dicts(get_path(self.root, path)):
                yield path + (i,), volume

    def volume_list(self) -> list | None:
        """The list new volumes go in (created on demand), ``None`` when a non-list is in the way."""
        path = self._volume_paths()[0]
        parent, key = get_path(self.root, path[:-1]), path[-1]
        if not isinstance(parent, dict) or not isinstance(key, str):
            return None
        return child_list(parent, key)


_ABSENT = object()


def _unset(value: Any) -> bool:
    return value is _ABSENT or value is None or (isinstance(value, list | dict | str) and not value)


@dataclass
class WorkloadView:
    """Everything a policy may look at for one object."""

    obj: dict
    kind: KindSpec
    workload_class: str
    templates: list[PodTemplate]
    # How the class was read (``gpuguard.workloads.lifecycle``): the evidence behind it, what the work looks
    # like (a guess), a declaration and whether it was honoured, whether the namespace lets it preempt.
    reading: ClassReading | None = None
    accelerators: Accelerators | None = None  # the config's profiles (for policies that look at all of them)
    # Inherited pod fields the view copied into templates: (template, field, the inherited value, the
    # template's own value before, or _ABSENT).
    inherited: list[tuple[PodTemplate, str, Any, Any]] = field(default_factory=list)
    inventory: Inventory = EMPTY_INVENTORY  # the cluster's node groups and pools (empty: profiles only)
    namespace: str | None = None  # where the object is stored (the request's namespace in the webhook)
    # Pod specs the view created where the kind allows them to be absent (a Dynamo service without
    # ``extraPodSpec``), as (parent, key): removed again by ``settle`` when no policy wrote into them.
    created: list[tuple[dict, str]] = field(default_factory=list)
    # Values the user set that policies changed (``gpuguard.workloads.paths.Replaced``), in the order written:
    # the engine attributes each to the policy that was running and warns about it.
    changes: list[Replaced] = field(default_factory=list)
    # Reads an object the workload names (group, kind, namespace, name) -> object or None: the request's
    # ``read_object`` (a PersistentVolumeClaim's access modes).  ``None``: nothing can be read.
    read_object: ReadObject | None = None
    # Lists the objects of a kind in a namespace (group, kind, namespace) -> objects, or None where they can't be
    # listed: the request's ``list_objects`` (the namespace's ResourceQuotas).  ``None``: nothing can be listed.
    list_objects: ListObjects | None = None

    def extended(self, path: Path, before: int, after: int, users: bool | None = None) -> None:
        """Record items appended to a list the user wrote (``users``; by default: it had ``before`` items), not
        to a list gpuguard started.  Appends to one list are one change, from the user's length to the last."""
        if not (before if users is None else users) or after <= before:
            return
        last = self.changes[-1] if self.changes else None
        if last is not None and last.how == "extended" and last.path == path:
            self.changes[-1] = Replaced(path, last.old, after, "extended")
        else:
            self.changes.append(Replaced(path, before, after, "extended"))

    def inherits(self, template: PodTemplate, key: str) -> bool:
        """Whether the template's ``key`` is a copy of the object's (Argo's workflow-level tolerations):
        not a list the user wrote there."""
        return any(t is template and k == key for t, k, _, _ in self.inherited)

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
    def annotations(self) -> dict:
        meta = self.obj.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        return annotations if isinstance(annotations, dict) else {}

    def writable_annotations(self) -> dict | None:
        """The object's annotations to write into (created when absent), or ``None`` on malformed metadata."""
        meta = child_dict(self.obj, "metadata")
        return child_dict(meta, "annotations") if meta is not None else None

    # ------------------------------------------------------------ kind facts, read once for the policies
    # What a kind keeps outside its pod templates (deadline, TTL and retry fields, gang settings, priority
    # classes, claims its controller makes) is read here, where the kind table says it is; a policy asks the
    # view and never walks the object with the kind's paths itself.

    def job_path(self, name: str) -> Path | None:
        """Where the kind keeps a job field (``ttl``, ``deadline``, ``backoff``, ``ttl_requires_true``), if any."""
        fields = self.kind.job
        path = getattr(fields, name, None) if fields is not None else None
        return path if isinstance(path, tuple) else None

    def job_value(self, name: str) -> Any:
        """The object's value of a job field (``None`` when the kind has no such field or it is unset)."""
        path = self.job_path(name)
        return get_path(self.obj, path) if path is not None else None

    def set_job_int(self, name: str, default: int, maximum: int | None, api_default: int | None = None) -> bool:
        """Default a job field where unset and cap it above ``maximum`` (a cap is recorded as a change)."""
        path = self.job_path(name)
        if path is None:
            return False
        return set_int_field(self.obj, path, default, maximum, api_default, changes=self.changes)

    def set_job_value(self, name: str, value: Any) -> bool:
        """Write a job field where its parent mapping exists (a RayJob's ``shutdownAfterJobFinishes``)."""
        path = self.job_path(name)
        parent = get_path(self.obj, path[:-1]) if path is not None else None
        if path is None or not isinstance(parent, dict):
            return False
        parent[path[-1]] = value
        return True

    def cap_job_variants(self, maximum: int) -> bool:
        """Cap the kind's other TTLs (``JobFields.ttl_variants``: Argo's per-outcome TTLs) above ``maximum``; never
        adds one.  Each cap is recorded as a change."""
        changed = False
        for path in self.kind.job.ttl_variants if self.kind.job is not None else ():
            value, parent = get_path(self.obj, path), get_path(self.obj, path[:-1])
            if isinstance(value, int) and not isinstance(value, bool) and value > maximum and isinstance(parent, dict):
                parent[path[-1]] = maximum
                self.changes.append(Replaced(path, value, maximum, "capped"))
                changed = True
        return changed

    def gang_value(self, name: str) -> Any:
        """The object's value of a gang setting of its kind (``min_available``, ``own_scheduler``,
        ``operator_policy``); ``None`` when the kind has none."""
        gang = self.kind.gang
        path = getattr(gang, name, None) if gang is not None else None
        return get_path(self.obj, path) if isinstance(path, tuple) else None

    def controller_gang_gap(self) -> str | None:
        """Why the cluster's own controller of the kind would not gang this object where it runs with gangs
        (``Gang.controller_gap``: the Job controller's WorkloadWithJob); ``None`` where it would."""
        gang = self.kind.gang
        if gang is None or gang.controller_gap is None:
            return f"the cluster's own {self.kind.kind} controller makes no gang"
        return gang.controller_gap(self.obj)

    def kind_commands(self) -> list[str]:
        """Command lines the kind's operator runs outside the pod templates (``KindSpec.command_paths``: a RayJob's
        ``entrypoint``), as the user wrote them."""
        texts = (get_path(self.obj, path) for path in self.kind.command_paths)
        return [text for text in texts if isinstance(text, str)]

    def kind_priority_classes(self) -> Iterator[tuple[Path, str]]:
        """Priority classes the kind keeps outside its pod templates (Kubeflow runPolicy, Volcano spec)."""
        for path in self.kind.priority_class_paths:
            name = get_path(self.obj, path)
            if isinstance(name, str):
                yield path, name

    def controller_claim_entries(self) -> list[dict]:
        """The entries of the claims the kind's controller creates outside the pod spec (``KindSpec.volume_claims``:
        StatefulSet claim templates, JobSet claim policies, Volcano volumes)."""
        claims = self.kind.volume_claims
        return [entry for _, entry in dicts(get_path(self.obj, claims.path))] if claims is not None else []

    def controller_owner(self) -> tuple[str, str] | None:
        """(group, kind) of the object's controlling ownerReference, as written (for settings that name kinds)."""
        meta = self.obj.get("metadata")
        for _, ref in dicts(meta.get("ownerReferences") if isinstance(meta, dict) else None):
            if ref.get("controller") is True:
                return str(ref.get("apiVersion", "")).rpartition("/")[0], str(ref.get("kind"))
        return None

    @cached_property
    def gpu_templates(self) -> list[PodTemplate]:
        """Cached, like the counts it reads: every policy asks, none changes templates or accelerator counts."""
        return [t for t in self.templates if t.gpus_per_pod]

    @cached_property
    def _running(self) -> list[tuple[PodTemplate, int]]:
        """(template, pods) running together at the heaviest moment: every template's replicas, or, for
        kinds that run templates in turn (``KindSpec.peak``), the pods of the moment with most GPUs."""
        if self.kind.peak is None:
            return [(t, t.ref.replicas) for t in self.templates]
        by_role = {t.ref.role: t for t in self.templates}
        counts = self.kind.peak(self.obj, lambda role: by_role[role].gpus_per_pod if role in by_role else 0)
        return [(by_role[role], n) for role, n in counts.items() if role in by_role and n > 0]

    def serving_groups(self) -> list[ServingGroup]:
        """Pods that run one model server together (``KindSpec.serving_groups``: LeaderWorkerSet groups,
        multi-node serving), empty where every pod runs its own servers."""
        groups = self.kind.serving_groups
        return list(groups(self.obj)) if groups is not None else []

    def ray_serve(self) -> RayServe | None:
        """The Ray Serve applications the object carries and its Ray cluster's facts (``KindSpec.serve_config``:
        a RayService), ``None`` where it has none gpuguard can read."""
        where = self.kind.serve_config
        demand = read_demand(get_path(self.obj, where.text)) if where is not None else None
        if where is None or demand is None:
            return None
        num_gpus = {}
        for template in self.templates:
            group = template.ref.spec_path[:-2]
            params = get_path(self.obj, group + ("rayStartParams",)) if group[:len(where.cluster)] == where.cluster \
                else None
            if isinstance(params, dict) and "num-gpus" in params:
                num_gpus[template.ref.role] = params["num-gpus"]
        autoscaled = get_path(self.obj, where.cluster + ("enableInTreeAutoscaling",)) is True
        return RayServe(demand, where.text, autoscaled, num_gpus)

    def running_templates(self) -> list[tuple[PodTemplate, int]]:
        """(template, pods of it) running together at the heaviest moment (see ``_running``)."""
        return list(self._running)

    @cached_property
    def total_gpus(self) -> int:
        return sum(t.gpus_per_pod * n for t, n in self._running)

    def settle(self) -> None:
        """Put back inherited pod fields no policy changed, so the object keeps inheriting them
        (and the patch holds only what policies did).  Call once policies are done with the view."""
        for template, key, value, before in self.inherited:
            if template.spec.get(key) != value:
                continue
            if before is _ABSENT:
                del template.spec[key]
            else:
                template.spec[key] = before
        self.inherited.clear()
        for parent, key in self.created:
            if parent.get(key) == {}:
                del parent[key]
        self.created.clear()

    @property
    def guessed_class(self) -> str:
        """What the work looks like (commands, images, ports): a guess that shapes messages and warnings only."""
        return self.reading.guessed if self.reading is not None else self.workload_class

    @property
    def class_is_evidence(self) -> bool:
        """Whether the class rests on evidence (the kind's purpose, the admin, an honoured declaration): only
        then may a finding that depends on it deny."""
        return self.reading.evidence if self.reading is not None else True

    @property
    def may_preempt(self) -> bool:
        """Whether the namespace lets this workload's class preempt (inference, where granted)."""
        if self.reading is not None:
            return self.reading.may_preempt
        return self.workload_class == "inference"

    @cached_property
    def is_gpu(self) -> bool:
        return any(t.gpus_per_pod for t in self.templates)

    def gpus_by_resource(self) -> dict[str, int]:
        """Accelerator units per resource (DRA: per device class) over the workload's pods."""
        totals: dict[str, int] = {}
        for t, n in self._running:
            for resource, count in t.effective_gpus.items():
                totals[resource] = totals.get(resource, 0) + count * n
        return totals

    def pod_count(self) -> int:
        return sum(n for _, n in self._running)


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


def build_view(obj: dict, kind: KindSpec, accelerators: Accelerators, workload_class: str,
               reading: ClassReading | None = None, namespace: str | None = None,
               claims: ClaimSource | None = None, refs: Sequence[TemplateRef] | None = None) -> WorkloadView:
    """Find every pod template of ``obj`` (a working copy) and the accelerators each container asks for.

    ``claims`` resolves DRA ResourceClaimTemplates/ResourceClaims (the webhook's cached watch,
    or the audit's input documents); without it a pod's claims are reported as unresolved.
    Pod fields a template inherits (``TemplateRef.inherits``) are copied into it: call
    ``WorkloadView.settle`` before diffing the object.  ``refs``: ``kind.locate(obj)`` where the caller has it
    (the engine locates once per evaluation, before anything changes the object).
    """
    templates: list[PodTemplate] = []
    inherited: list[tuple[PodTemplate, str, Any, Any]] = []
    namespace = namespace or _object_namespace(obj)
    created: list[tuple[dict, str]] = []
    for ref in kind.locate(obj) if refs is None else refs:
        shape = shape_of(ref)
        spec = get_path(obj, ref.spec_path)
        if spec is None:  # a Dynamo service without extraPodSpec still has its GPUs
            spec = shape.spec_where_absent(obj, ref)
            if spec is not None:  # made in its parent: settle() removes it again if it stays empty
                parent, key = get_path(obj, ref.spec_path[:-1]), ref.spec_path[-1]
                if isinstance(parent, dict) and isinstance(key, str):
                    created.append((parent, key))
        if not isinstance(spec, dict):
            continue
        containers = _containers(obj, ref, spec, accelerators)
        template = PodTemplate(ref, spec, obj, containers)
        for key, source in ref.inherits:
            current = spec.get(key, _ABSENT)
            value = get_path(obj, source)
            if _unset(current) and not _unset(value):  # Argo: an empty list counts as unset
                spec[key] = copy.deepcopy(value)
                inherited.append((template, key, value, current))
        if spec.get("resourceClaims"):
            attach_claims(template, namespace, accelerators, claims)
        _attach_kai_share(template, accelerators)
        for key, value in shape.inherited_pod_fields(spec, accelerators).items():
            current = spec.get(key, _ABSENT)
            if _unset(current):  # a KubeAI profile's node selection and tolerations
                spec[key] = copy.deepcopy(value)
                inherited.append((template, key, value, current))
        unread = shape.unread_claims(spec, ref.spec_path, accelerators)
        template.unresolved_claims.extend(unread)
        template.unjudged_claims.extend(unread)
        templates.append(template)
    return WorkloadView(obj, kind, workload_class, templates, reading, accelerators, inherited,
                        namespace=namespace, created=created)


def _containers(obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> list[Container]:
    containers: list[Container] = []
    main = shape_of(ref).main_container(obj, ref, spec, accelerators)  # gpuguard.workloads.shapes
    if main is not None:
        containers.append(main)
    for list_path in ref.container_lists:
        for i, body in dicts(spec.get(list_path[0]) if len(list_path) == 1 else get_path(spec, list_path)):
            gpus, profiles = container_gpus(body, accelerators)
            containers.append(Container(i, list_path[-1], body, ref.spec_path, gpus, profiles,
                                        list_path=list_path if len(list_path) > 1 else ()))
    for key in ref.container_keys:  # single-container keys (KServe's predictor.model, Argo's container …)
        single = spec.get(key)
        if isinstance(single, dict):
            gpus, profiles = container_gpus(single, accelerators)
            containers.append(Container(None, key, single, ref.spec_path, gpus, profiles))
    return containers


def _object_namespace(obj: dict) -> str | None:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ns if isinstance(ns, str) and ns else None


def _attach_kai_share(template: PodTemplate, accelerators: Accelerators) -> None:
    """A KAI Scheduler GPU share (``gpu-fraction``/``gpu-memory`` annotations): its devices counted like a DRA
    claim's, on the container KAI gives them to (``gpuguard.workloads.accelerators.kai_share``)."""
    meta = template.metadata()
    share = kai_share(meta.get("annotations") if isinstance(meta, dict) else None)
    profile = accelerators.for_device_class(KAI_SHARE) if share is not None else None
    if share is None or profile is None:
        return
    devices, name = share
    holder = next((c for c in template.containers if c.body.get("name") == name) if name else
                  (c for c in template.containers if c.list_name == "containers"), None)
    template.claim_devices[KAI_SHARE] = template.claim_devices.get(KAI_SHARE, 0) + devices
    template.claim_profiles[KAI_SHARE] = profile
    if holder is not None:
        holder.claim_devices[KAI_SHARE] = holder.claim_devices.get(KAI_SHARE, 0) + devices
        holder.claim_profiles[KAI_SHARE] = profile
