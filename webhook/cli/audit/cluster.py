"""``audit --cluster``: every workload a live cluster runs, as the webhook would have seen it on CREATE.

What gets listed is ``gpuguard.workloads.kinds.KINDS``, restricted by API discovery to what the cluster
serves (a PyTorchJob is only listed where its CRD is installed, in a version gpuguard reads).
Lists are paginated (``limit``/``continue``) so a large cluster never lands in one response.

Each object is cleaned of what the server set (status, uid, resourceVersion, managedFields
...) so it looks like what a user applies, and is paired with a CREATE ``RequestContext``
carrying its namespace's real labels, which select the config profile exactly as the
webhook would.  Objects controlled by another object gpuguard lists (ReplicaSets of a
Deployment, Pods of a Job, Jobs of a JobSet) are skipped: their controller is audited, and
counting them again would multiply every finding and the cost estimate.

Everything goes through an ``ApiClient`` given by the caller, so tests can point it at a
fake or a real apiserver.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpuguard.kubeapi.client import ApiError, Connection, KubeConfigError, apis, core_v1, custom_objects
from gpuguard.kubeapi.client import connect as _connect
from gpuguard.webhook.cli.audit.cost import is_finished
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.manifests import Document
from gpuguard.workloads.claims import StaticClaims
from gpuguard.workloads.inventory import (
    DeviceClass,
    Inventory,
    SliceEntry,
    device_classes,
    from_objects,
    slice_entry,
)
from gpuguard.workloads.kinds import TEMPLATE_HOLDERS, KindSpec, all_kinds, lookup, lookup_group_kind
from gpuguard.workloads.kinds.configured import unknown_pod_kinds

DEFAULT_CHUNK_SIZE = 500
SERVER_SET_METADATA = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation",
                       "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")
# Annotations written by clients and controllers, not by the workload's author.
NOISE_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration", "deployment.kubernetes.io/revision")
_MAX_RELIST = 3


class ClusterError(Exception):
    """The cluster cannot be audited at all (no kubeconfig, unreachable, discovery refused)."""


def connect(kubeconfig: str | None = None, context: str | None = None) -> Connection:
    """An API client by ``gpuguard.kubeapi.client``'s credential order; ``ClusterError`` when there is none."""
    try:
        return _connect(kubeconfig, context)
    except KubeConfigError as exc:
        raise ClusterError(str(exc)) from exc


@dataclass(frozen=True)
class ServedKind:
    """A gpuguard kind in the version this cluster serves it."""

    spec: KindSpec
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.spec.group}/{self.version}" if self.spec.group else self.version

    @property
    def label(self) -> str:
        return f"{self.spec.kind} ({self.api_version})"


def strip_server_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``obj`` as its author would submit it: no status, no server-set metadata."""
    clean = copy.deepcopy(obj)
    clean.pop("status", None)
    meta = clean.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_SET_METADATA:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in NOISE_ANNOTATIONS:
                annotations.pop(key, None)
            if not annotations:
                meta.pop("annotations")
    return clean


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


@dataclass
class ClusterLister:
    """Lists the workloads of one cluster (all namespaces, or one) for the audit."""

    api: Any  # kubernetes.client.ApiClient
    namespace: str | None = None  # None: all namespaces
    chunk_size: int = DEFAULT_CHUNK_SIZE
    source: str = "cluster"
    notes: list[str] = field(default_factory=list)  # degraded but usable: shown, not fatal
    errors: list[str] = field(default_factory=list)  # a kind that could not be listed: exit 2
    skipped_owned: int = 0
    dra_version: str | None = None  # the resource.k8s.io version the cluster serves (found by ``claims``)
    class_objects: list[dict[str, Any]] = field(default_factory=list)  # the DeviceClasses as listed (``claims``)

    @property
    def device_classes(self) -> list[DeviceClass]:
        """The listed DeviceClasses as the accelerator model reads them: what else counts as an accelerator."""
        return device_classes(self.class_objects)

    def served_kinds(self) -> list[ServedKind]:
        """gpuguard's kinds that this cluster serves, via API discovery."""
        try:
            core = {r.name for r in core_v1(self.api).get_api_resources().resources or []}
            groups = {g.name: g for g in apis(self.api).get_api_versions().groups or []}
        except ApiError as exc:
            raise ClusterError(f"API discovery failed: {_reason(exc)}") from exc
        except Exception as exc:  # urllib3/SSL/connection errors: say what the cluster was
            raise ClusterError(f"cannot reach the cluster at {self.api.configuration.host}: {exc}") from exc
        resources: dict[tuple[str, str], set[str]] = {}
        served: list[ServedKind] = []
        missing: list[str] = []
        for spec in all_kinds():
            version = self._version_for(spec, core, groups, resources)
            if version is None:
                missing.append(f"{spec.kind} ({spec.group or 'core'})")
            else:
                served.append(ServedKind(spec, version))
        if missing:
            self.notes.append("not served by this cluster (CRD not installed), not listed: "
                              + ", ".join(missing))
        return served + self._unknown_kinds({(s.spec.group, s.spec.kind) for s in served})

    def _unknown_kinds(self, known: set[tuple[str, str]]) -> list[ServedKind]:
        """Custom resources gpuguard has no kind for whose schema holds a PodSpec (``containers`` with images):
        listed so that the engine reports those asking for accelerators as unknown kinds, never passing them in
        silence.  Open schemas can't say: they are named in a note."""
        try:
            listed = self._pages(lambda **kw: custom_objects(self.api).list_cluster_custom_object(
                "apiextensions.k8s.io", "v1", "customresourcedefinitions", **kw))
            crds = list(listed)
        except ApiError as exc:
            self.notes.append(f"cannot list CustomResourceDefinitions ({_reason(exc)}): kinds gpuguard doesn't "
                              "know were not looked for")
            return []
        specs, unreadable = unknown_pod_kinds(
            crds, lambda group, kind: (group, kind) in known or (group, kind) in TEMPLATE_HOLDERS
            or lookup_group_kind(group, kind) is not None)
        if unreadable:
            self.notes.append("kinds gpuguard doesn't know whose open schemas can't say if they hold pods, not "
                              "listed: " + ", ".join(unreadable[:10]) + (" …" if len(unreadable) > 10 else ""))
        return [ServedKind(spec, spec.versions[0]) for spec in specs]

    def _version_for(self, spec: KindSpec, core: set[str], groups: dict[str, Any],
                     cache: dict[tuple[str, str], set[str]]) -> str | None:
        if not spec.group:
            return "v1" if spec.plural in core else None
        group = groups.get(spec.group)
        if group is None:
            return None
        offered = [v.version for v in group.versions or []]
        preferred = group.preferred_version.version if group.preferred_version else None
        candidates = [preferred] if preferred in spec.versions else []
        candidates += [v for v in spec.versions if v in offered]
        for version in dict.fromkeys(candidates):
            key = (spec.group, version)
            if key not in cache:
                try:
                    listing = custom_objects(self.api).get_api_resources(spec.group, version)
                    cache[key] = {r.name for r in listing.resources or [] if "list" in (r.verbs or [])}
                except ApiError as exc:
                    self.notes.append(f"discovery of {spec.group}/{version} failed: {_reason(exc)}")
                    cache[key] = set()
            if spec.plural in cache[key]:
                return version
        return None

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Labels of the audited namespaces: they pick the config profile, as in the webhook."""
        core = core_v1(self.api)
        try:
            if self.namespace:
                items = [_load(core.read_namespace(self.namespace, _preload_content=False))]
            else:
                items = list(self._pages(lambda **kw: core.list_namespace(**kw)))
        except ApiError as exc:
            self.notes.append(f"cannot read namespace labels ({_reason(exc)}): profiles chosen by label are "
                              "not applied")
            return {}
        out = {}
        for ns in items:
            meta = ns.get("metadata") or {}
            labels = meta.get("labels") or {}
            out[meta.get("name", "")] = {str(k): str(v) for k, v in labels.items()}
        return out

    def objects(self, on_kind: Callable[[str, int, int], None] | None = None
                ) -> Iterator[tuple[Document, RequestContext]]:
        """Every listed, uncontrolled workload with its CREATE context; ``on_kind(label, done, total)``."""
        served = self.served_kinds()
        listed = {s.spec.api_group_kind for s in served}
        labels = self.namespace_labels()
        index = 0
        for done, kind in enumerate(served):
            if on_kind is not None:
                on_kind(kind.label, done, len(served))
            try:
                for raw in self._list_kind(kind):
                    owner = controller_of(raw)
                    if owner is not None:
                        owner_spec = lookup(owner.get("apiVersion"), owner.get("kind"))
                        if owner_spec is not None and owner_spec.api_group_kind in listed:
                            self.skipped_owned += 1
                            continue
                    raw.setdefault("apiVersion", kind.api_version)
                    raw.setdefault("kind", kind.spec.kind)
                    obj = strip_server_fields(raw)
                    namespace = (obj.get("metadata") or {}).get("namespace") or self.namespace
                    ctx = RequestContext(operation="CREATE", namespace=namespace,
                                         namespace_labels=dict(labels.get(namespace or "", {})))
                    yield Document(self.source, index, obj=obj, finished=is_finished(raw)), ctx
                    index += 1
            except ApiError as exc:
                self.errors.append(f"cannot list {kind.label}: {_reason(exc)}")
        if on_kind is not None:
            on_kind("done", len(served), len(served))

    def nodes(self) -> Inventory | None:
        """The cluster's Nodes as a node inventory (docs/inventory.md), or None (a note says why) when they
        cannot be listed: the audit then decides as the webhook does without ``--node-inventory``."""
        api = core_v1(self.api)
        try:
            raw = [self.api.sanitize_for_serialization(n) for n in api.list_node().items or []]
        except ApiError as exc:
            self.notes.append(f"cannot list nodes ({_reason(exc)}): decided without a node inventory")
            return None
        except Exception:  # noqa: BLE001 - connection trouble: served_kinds() reports it properly
            return None
        for node in raw:
            node.setdefault("apiVersion", "v1")
            node.setdefault("kind", "Node")
        return from_objects([*raw, *self.class_objects], slice_entries=self._slice_entries())

    def _slice_entries(self) -> list[SliceEntry]:
        """The devices per node that the DRA drivers' ResourceSlices publish (read after ``claims``,
        which finds the served version): a node whose GPUs only a DRA driver serves counts them as the
        extended resource its DeviceClass maps them to (docs/inventory.md)."""
        from gpuguard.workloads.claims import GROUP

        if self.dra_version is None:
            return []
        custom, version = custom_objects(self.api), self.dra_version
        try:
            listed = self._pages(lambda **kw: custom.list_cluster_custom_object(GROUP, version, "resourceslices", **kw))
            entries = [entry for raw in listed if (entry := slice_entry(
                {**raw, "apiVersion": f"{GROUP}/{version}", "kind": "ResourceSlice"})) is not None]
        except ApiError as exc:
            self.notes.append(f"cannot list resourceslices ({_reason(exc)}): DRA devices are not counted on nodes")
            return []
        return entries

    def claims(self) -> StaticClaims:
        """DRA ResourceClaimTemplates and ResourceClaims in scope, to resolve pods' resourceClaims."""
        from gpuguard.workloads.claims import GROUP, PLURALS, VERSIONS

        origin = f"the cluster's {GROUP} objects"
        try:
            groups = {g.name: g for g in apis(self.api).get_api_versions().groups or []}
        except ApiError as exc:
            self.notes.append(f"cannot discover {GROUP} ({_reason(exc)}): DRA claims are not resolved")
            return StaticClaims(origin=origin)
        except Exception:  # noqa: BLE001 - connection trouble: served_kinds() reports it properly next
            return StaticClaims(origin=origin)
        served = {v.version for v in groups[GROUP].versions or []} if GROUP in groups else set()
        version = next((v for v in VERSIONS if v in served), None)
        if version is None:
            return StaticClaims(origin=f"this cluster (it does not serve {GROUP})")
        self.dra_version = version
        custom = custom_objects(self.api)
        found = StaticClaims(origin=origin)
        for kind, plural in PLURALS.items():
            def call(plural: str = plural, **kw: Any) -> Any:
                if self.namespace:
                    return custom.list_namespaced_custom_object(GROUP, version, self.namespace, plural, **kw)
                return custom.list_cluster_custom_object(GROUP, version, plural, **kw)
            try:
                for raw in self._pages(call):
                    raw.setdefault("apiVersion", f"{GROUP}/{version}")
                    raw["kind"] = kind
                    found.add(raw)
            except ApiError as exc:
                self.notes.append(f"cannot list {plural} ({_reason(exc)}): pods' DRA claims are not resolved")
        try:  # what the cluster's DeviceClasses say is an accelerator (docs/accelerators.md)
            listed = self._pages(lambda **kw: custom.list_cluster_custom_object(GROUP, version, "deviceclasses", **kw))
            self.class_objects = [{**raw, "apiVersion": f"{GROUP}/{version}", "kind": "DeviceClass"} for raw in listed]
        except ApiError as exc:
            self.notes.append(f"cannot list deviceclasses ({_reason(exc)}): accelerators are not learned from them")
        return found

    def _list_kind(self, kind: ServedKind) -> Iterator[dict[str, Any]]:
        spec, ns = kind.spec, self.namespace
        if not spec.group:
            core = core_v1(self.api)
            method = getattr(core, f"list_namespaced_{_singular(spec)}" if ns else
                             f"list_{_singular(spec)}_for_all_namespaces")

            def call(**kw: Any) -> Any:
                return method(ns, **kw) if ns else method(**kw)
        else:
            custom = custom_objects(self.api)

            def call(**kw: Any) -> Any:
                group, version, plural = spec.group, kind.version, spec.plural
                if ns:
                    return custom.list_namespaced_custom_object(group, version, ns, plural, **kw)
                return custom.list_cluster_custom_object(group, version, plural, **kw)
        yield from self._pages(call)

    def _pages(self, call: Callable[..., Any]) -> Iterator[dict[str, Any]]:
        """Items of a paginated list.  An expired continue token (410) restarts the list,
        skipping what was already returned, rather than failing the audit."""
        seen: set[tuple[str, str]] = set()
        for _ in range(_MAX_RELIST):
            token: str | None = None
            try:
                while True:
                    kwargs: dict[str, Any] = {"limit": self.chunk_size, "_preload_content": False}
                    if token:
                        kwargs["_continue"] = token
                    page = _load(call(**kwargs))
                    for item in page.get("items") or []:
                        meta = item.get("metadata") or {}
                        key = (meta.get("namespace") or "", meta.get("name") or "")
                        if key in seen:
                            continue
                        seen.add(key)
                        yield item
                    token = (page.get("metadata") or {}).get("continue")
                    if not token:
                        return
            except ApiError as exc:
                if exc.status != 410 or not token:
                    raise
        raise ApiError(status=410, reason="continue token kept expiring")


def _singular(spec: KindSpec) -> str:
    return spec.kind.lower()


def _load(response: Any) -> dict[str, Any]:
    """JSON body of a ``_preload_content=False`` response (urllib3), which skips model parsing."""
    data = response.data if hasattr(response, "data") else response.read()
    return orjson.loads(data)


def _reason(exc: ApiError) -> str:
    """``403 Forbidden: pods is forbidden: ...`` from an ApiError's Status body."""
    message = ""
    if exc.body:
        try:
            message = orjson.loads(exc.body).get("message", "")
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            message = str(exc.body)[:200]
    head = f"{exc.status} {exc.reason}".strip()
    return f"{head}: {message}" if message else head
