"""DRA: the devices a pod gets through ``spec.resourceClaims``, resolved to accelerator profiles.

A pod can hold GPUs with no ``nvidia.com/gpu`` in its resources: its ``resourceClaims``
name a ResourceClaimTemplate (one claim per pod) or a ResourceClaim (shared), whose device
requests name a DeviceClass.  The AdmissionReview carries none of those objects, so:

- the webhook keeps a cached watch of ResourceClaimTemplates and ResourceClaims
  (``ClaimWatch``; RBAC in ``deploy/base/rbac.yaml``) and looks claims up in memory, never
  calling the apiserver inside a review;
- ``gpuguard audit`` resolves them from the same input files, or lists them from the cluster
  (``StaticClaims``).

A DeviceClass maps to a profile by name (``deviceClasses`` in the profile); a class no
profile names is not an accelerator (a NIC, say) and counts nothing.  A claim gpuguard
cannot read is reported as a warning on the pod, never counted as a silent 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from webhook.accelerators import Accelerators
    from webhook.workload import PodTemplate

log = logging.getLogger("gpuguard.claims")

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first: the watch uses the first one served
ClaimKind = Literal["ResourceClaimTemplate", "ResourceClaim"]
PLURALS: dict[str, str] = {"ResourceClaimTemplate": "resourceclaimtemplates", "ResourceClaim": "resourceclaims"}


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a claim: ``count`` devices of ``device_class`` (``None``: allocationMode All)."""

    name: str
    device_class: str
    count: int | None


def _one(request: dict) -> tuple[str | None, int | None]:
    """(deviceClassName, count) of a v1beta1 request, a v1beta2/v1 ``exactly`` or a subrequest."""
    device_class = request.get("deviceClassName")
    if request.get("allocationMode") == "All":
        return device_class, None
    count = request.get("count", 1)
    return device_class, count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def device_requests(claim_spec: Any) -> list[DeviceRequest]:
    """The device requests of a ResourceClaimSpec (``{devices: {requests: [...]}}``), any served version.

    ``firstAvailable`` (prioritized alternatives) counts its first alternative: the one the
    scheduler tries first.  Admin-access requests hold no device exclusively and count nothing.
    """
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    out: list[DeviceRequest] = []
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        body = request.get("exactly") if isinstance(request.get("exactly"), dict) else request
        alternatives = request.get("firstAvailable")
        if isinstance(alternatives, list) and alternatives and isinstance(alternatives[0], dict):
            body = alternatives[0]
        if body.get("adminAccess") is True:
            continue
        device_class, count = _one(body)
        if isinstance(device_class, str) and device_class:
            out.append(DeviceRequest(str(request.get("name", "")), device_class, count))
    return out


def claim_spec_of(obj: dict) -> dict | None:
    """The ResourceClaimSpec inside a ResourceClaim (``spec``) or a ResourceClaimTemplate (``spec.spec``)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if obj.get("kind") == "ResourceClaimTemplate":
        inner = spec.get("spec")
        return inner if isinstance(inner, dict) else None
    return spec


class ClaimSource(Protocol):
    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        """The claim's device requests, or ``None`` when it is unknown."""

    def why_unknown(self) -> str:
        """Why a lookup may fail, for the warning (e.g. "the watch has not synced yet")."""


class StaticClaims:
    """Claims known from a fixed set of objects: the audit's input documents or one cluster listing."""

    def __init__(self, objects: Iterable[Any] = (), origin: str = "the audited input"):
        self._claims: dict[tuple[str, str | None, str], list[DeviceRequest]] = {}
        self.origin = origin
        for obj in objects:
            self.add(obj)

    def add(self, obj: Any) -> None:
        if not isinstance(obj, dict) or obj.get("kind") not in PLURALS:
            return
        if not str(obj.get("apiVersion", "")).startswith(GROUP + "/"):
            return
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if isinstance(name, str):
            ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
            self._claims[(obj["kind"], ns, name)] = device_requests(claim_spec_of(obj))

    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        found = self._claims.get((kind, namespace, name))
        if found is None:  # files often leave the namespace out: such an object goes wherever the pod goes
            found = self._claims.get((kind, None, name))
        return found

    def why_unknown(self) -> str:
        return f"it is not in {self.origin}"


class ClaimWatch:
    """A cached list+watch of ResourceClaimTemplates and ResourceClaims, for the webhook.

    One daemon thread per kind lists, then watches from the list's resourceVersion, and
    re-lists after an error or an expired watch (410) with a capped back-off.  Lookups read a
    dict (no lock needed: each update replaces one key, which is atomic in CPython).  Only
    the device requests are kept, not whole objects.
    """

    def __init__(self, api_client: Any, version: str | None = None):
        self._api_client = api_client
        self._version = version
        self._store: dict[tuple[str, str | None, str], list[DeviceRequest]] = {}
        self._synced: dict[str, bool] = {kind: False for kind in PLURALS}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.error: str | None = None

    # ------------------------------------------------------------------ ClaimSource
    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        return self._store.get((kind, namespace, name))

    def why_unknown(self) -> str:
        if self.error:
            return f"the claim watch is failing ({self.error})"
        if not all(self._synced.values()):
            return "the claim watch has not synced yet"
        return "no such object in the namespace"

    @property
    def synced(self) -> bool:
        return all(self._synced.values())

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ClaimWatch:
        from kubernetes import client

        api = client.CustomObjectsApi(self._api_client)
        version = self._version or self._served_version()
        for kind, plural in PLURALS.items():
            thread = threading.Thread(target=self._run, args=(api, version, kind, plural), daemon=True,
                                      name=f"gpuguard-watch-{plural}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()

    def _served_version(self) -> str:
        from kubernetes import client

        try:
            groups = client.ApisApi(self._api_client).get_api_versions().groups or []
        except Exception as exc:  # noqa: BLE001 - any API failure: fall back and let the watch report it
            self.error = f"API discovery failed: {type(exc).__name__}"
            return VERSIONS[-1]
        for group in groups:
            if group.name == GROUP:
                served = {v.version for v in group.versions or []}
                for version in VERSIONS:
                    if version in served:
                        return version
        self.error = f"the apiserver does not serve {GROUP}"
        return VERSIONS[-1]

    def _run(self, api: Any, version: str, kind: str, plural: str) -> None:
        from kubernetes import watch

        delay = 1.0
        while not self._stop.is_set():
            try:
                listing = api.list_cluster_custom_object(GROUP, version, plural)
                fresh = {}
                for item in listing.get("items", []):
                    item["kind"] = kind
                    fresh[self._key(kind, item)] = device_requests(claim_spec_of(item))
                for key in [k for k in self._store if k[0] == kind and k not in fresh]:
                    self._store.pop(key, None)
                self._store.update(fresh)
                self._synced[kind] = True
                self.error = None
                delay = 1.0
                resource_version = listing.get("metadata", {}).get("resourceVersion")
                stream = watch.Watch().stream(api.list_cluster_custom_object, GROUP, version, plural,
                                              resource_version=resource_version, timeout_seconds=300)
                for event in stream:
                    if self._stop.is_set():
                        return
                    obj = event.get("object")
                    if not isinstance(obj, dict) or event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
                    obj["kind"] = kind
                    if event.get("type") == "DELETED":
                        self._store.pop(self._key(kind, obj), None)
                    else:
                        self._store[self._key(kind, obj)] = device_requests(claim_spec_of(obj))
            except Exception as exc:  # noqa: BLE001 - keep watching; lookups report the failure
                self.error = f"{plural}: {type(exc).__name__}"
                log.warning("watching %s failed (%s); retrying in %.0f s", plural, type(exc).__name__, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)

    @staticmethod
    def _key(kind: str, obj: dict) -> tuple[str, str | None, str]:
        meta = obj.get("metadata") or {}
        return kind, meta.get("namespace"), str(meta.get("name", ""))


class _Unconfigured:
    """The source when nothing resolves claims (no watch started, no audit input)."""

    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        return None

    def why_unknown(self) -> str:
        return "gpuguard is not reading DRA claims here (serve with --dra-claims)"


UNCONFIGURED = _Unconfigured()
_shared: ClaimSource | None = None


def start_shared_watch(api_client: Any, wait_seconds: float = 10.0) -> ClaimWatch:
    """Start the process's claim watch (the server's engines read it through ``shared()``)."""
    global _shared
    watch = ClaimWatch(api_client).start()
    deadline = time.monotonic() + wait_seconds
    while not watch.synced and time.monotonic() < deadline:
        time.sleep(0.05)
    _shared = watch
    return watch


def shared() -> ClaimSource | None:
    return _shared


# ---------------------------------------------------------------- attaching claims to a pod template

def _claim_ref(entry: dict) -> tuple[ClaimKind, str] | None:
    """Which object a pod's ``resourceClaims[]`` entry names (1.31+ fields, or the older ``source``)."""
    source = entry.get("source") if isinstance(entry.get("source"), dict) else entry
    for field_name, kind in (("resourceClaimTemplateName", "ResourceClaimTemplate"),
                             ("resourceClaimName", "ResourceClaim")):
        name = source.get(field_name)
        if isinstance(name, str) and name:
            return kind, name  # type: ignore[return-value]
    return None


def attach_claims(template: PodTemplate, namespace: str | None, accelerators: Accelerators,
                  claims: ClaimSource | None) -> None:
    """Count the devices of ``template``'s claims into it (and into the first container using each)."""
    from webhook.workload import dicts

    source = claims if claims is not None else (_shared or UNCONFIGURED)
    users: dict[str, list] = {}
    for container in template.containers:
        res = container.resources()
        for _, ref in dicts(res.get("claims") if res else None):
            if isinstance(ref.get("name"), str):
                users.setdefault(ref["name"], []).append((container, ref.get("request")))
    for i, entry in dicts(template.spec.get("resourceClaims")):
        path = template.spec_path + ("resourceClaims", i)
        ref = _claim_ref(entry)
        claim_name = entry.get("name")
        if ref is None:
            template.unresolved_claims.append((path, f"resource claim {claim_name!r} names no ResourceClaim or "
                                               "ResourceClaimTemplate: its devices are not counted"))
            continue
        kind, name = ref
        requests = source.lookup(kind, namespace, name)
        if requests is None:
            template.unresolved_claims.append((path, f"{kind} {name} could not be resolved ({source.why_unknown()}): "
                                               "its devices are not counted or checked"))
            continue
        first_user = users.get(claim_name, [(None, None)])[0]
        for request in requests:
            profile = accelerators.for_device_class(request.device_class)
            if profile is None:
                continue  # not an accelerator class
            count = request.count
            if count is None:
                count = profile.max_per_node
                if count is None:
                    template.unresolved_claims.append((path, f"{kind} {name} asks for all devices of class "
                                                       f"{request.device_class}, and profile {profile.name} has "
                                                       "no maxPerNode: counted as 1"))
                    count = 1
            dc = request.device_class
            template.claim_devices[dc] = template.claim_devices.get(dc, 0) + count
            template.claim_profiles[dc] = profile
            container, only_request = first_user
            if container is not None and (only_request in (None, "", request.name)):
                container.claim_devices[dc] = container.claim_devices.get(dc, 0) + count
                container.claim_profiles[dc] = profile
