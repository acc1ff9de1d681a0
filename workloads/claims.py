"""DRA: the devices a pod gets through ``spec.resourceClaims``, resolved to accelerator profiles.

A pod can hold GPUs with no ``nvidia.com/gpu`` in its resources: its ``resourceClaims``
name a ResourceClaimTemplate (one claim per pod) or a ResourceClaim (shared), whose device
requests name a DeviceClass.  The AdmissionReview carries none of those objects, so:

- the webhook keeps a cached watch of ResourceClaimTemplates and ResourceClaims
  (``webhook/server/claimwatch.py``; RBAC in ``deploy/base/rbac.yaml``) and looks claims up in
  memory, never calling the apiserver inside a review;
- ``gpuguard audit`` resolves them from the same input files, or lists them from the cluster
  (``StaticClaims``).

A DeviceClass maps to a profile by name (``deviceClasses`` in the profile); a class no
profile names is not an accelerator (a NIC, say) and counts nothing.  A claim gpuguard
cannot read is reported as a warning on the pod, never counted as a silent 0.

This module is pure (no Kubernetes client): parsing claims, the static source, and attaching
a pod's claims to its template; the watch lives in ``webhook/server/claimwatch.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gpuguard.workloads.paths import dicts

if TYPE_CHECKING:
    from gpuguard.workloads.accelerators import Accelerators, Profile
    from gpuguard.workloads.view import PodTemplate

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
    # ``firstAvailable``: every alternative the scheduler may choose; the largest is what the pod may get.
    alternatives: tuple[DeviceRequest, ...] = ()


def _one(request: dict) -> tuple[str | None, int | None]:
    """(deviceClassName, count) of a v1beta1 request, a v1beta2/v1 ``exactly`` or a subrequest."""
    device_class = request.get("deviceClassName")
    if request.get("allocationMode") == "All":
        return device_class, None
    count = request.get("count", 1)
    return device_class, count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def device_requests(claim_spec: Any) -> list[DeviceRequest]:
    """The device requests of a ResourceClaimSpec (``{devices: {requests: [...]}}``), any served version.

    ``firstAvailable`` (prioritized alternatives) keeps every alternative: the scheduler takes the
    first one it can satisfy, which may be any of them, so the pod is judged by the largest
    (``attach_claims``).  Admin-access requests hold no device exclusively and count nothing.
    """
    devices = claim_spec.get("devices") if isinstance(claim_spec, dict) else None
    requests = devices.get("requests") if isinstance(devices, dict) else None
    out: list[DeviceRequest] = []
    for request in requests if isinstance(requests, list) else []:
        if not isinstance(request, dict):
            continue
        name = str(request.get("name", ""))
        alternatives = request.get("firstAvailable")
        if isinstance(alternatives, list) and alternatives:
            options = tuple(r for r in (_request(name, a) for a in alternatives if isinstance(a, dict)) if r)
            if options:
                out.append(DeviceRequest(name, options[0].device_class, options[0].count, options))
            continue
        exactly = request.get("exactly")
        found = _request(name, exactly if isinstance(exactly, dict) else request)
        if found is not None:
            out.append(found)
    return out


def _request(name: str, body: dict) -> DeviceRequest | None:
    if body.get("adminAccess") is True:
        return None
    device_class, count = _one(body)
    return DeviceRequest(name, device_class, count) if isinstance(device_class, str) and device_class else None


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


# Objects whose controller creates a claim (template) from them: (apiVersion group, kind) -> what it makes,
# as (kind, name path, device requests).  The NVIDIA DRA driver's ComputeDomain makes the
# ResourceClaimTemplate its ``spec.channel.resourceClaimTemplate.name`` names, one IMEX channel per pod;
# a manifest that applies both, or a cluster where the domain exists, has that template as good as made.
COMPUTE_DOMAIN_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CLAIM_MAKERS: dict[tuple[str, str], tuple[ClaimKind, tuple[str, ...], tuple[DeviceRequest, ...]]] = {
    ("resource.nvidia.com", "ComputeDomain"): (
        "ResourceClaimTemplate", ("spec", "channel", "resourceClaimTemplate", "name"),
        (DeviceRequest("channel", COMPUTE_DOMAIN_CHANNEL_CLASS, 1),)),
}


def made_claim(obj: Any) -> tuple[ClaimKind, str, list[DeviceRequest]] | None:
    """The claim (template) a known controller will create from ``obj``: (kind, name, device requests)."""
    if not isinstance(obj, dict):
        return None
    api_version = obj.get("apiVersion")
    group = api_version.rsplit("/", 1)[0] if isinstance(api_version, str) and "/" in api_version else ""
    maker = CLAIM_MAKERS.get((group, str(obj.get("kind"))))
    if maker is None:
        return None
    kind, path, requests = maker
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return (kind, value, list(requests)) if isinstance(value, str) and value else None


class StaticClaims:
    """Claims known from a fixed set of objects: the audit's input documents or one cluster listing, and the
    claims a known controller will make from them (``CLAIM_MAKERS``)."""

    def __init__(self, objects: Iterable[Any] = (), origin: str = "the audited input"):
        self._claims: dict[tuple[str, str | None, str], list[DeviceRequest]] = {}
        self.origin = origin
        for obj in objects:
            self.add(obj)

    def add(self, obj: Any) -> None:
        made = made_claim(obj)
        if made is not None:
            meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
            namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
            self._claims.setdefault((made[0], namespace, made[1]), made[2])
            return
        if not isinstance(obj, dict) or obj.get("kind") not in PLURALS:
            return
        if not str(obj.get("apiVersion", "")).startswith(GROUP + "/"):
            return
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        name, namespace = meta.get("name"), meta.get("namespace")
        if isinstance(name, str):
            ns = namespace if isinstance(namespace, str) else None
            self._claims[(obj["kind"], ns, name)] = device_requests(claim_spec_of(obj))

    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        found = self._claims.get((kind, namespace, name))
        if found is None:  # files often leave the namespace out: such an object goes wherever the pod goes
            found = self._claims.get((kind, None, name))
        return found

    def why_unknown(self) -> str:
        return f"it is not in {self.origin}"


class _Unconfigured:
    """The source when nothing resolves claims (no watch started, no audit input)."""

    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        return None

    def why_unknown(self) -> str:
        return "gpuguard is not reading DRA claims here (serve with --dra-claims)"


UNCONFIGURED = _Unconfigured()
_shared: ClaimSource | None = None


def set_shared(source: ClaimSource | None) -> None:
    """Make ``source`` the process's claim source (the server's watch, ``gpuguard.webhook.server.claimwatch``)."""
    global _shared
    _shared = source


def shared() -> ClaimSource | None:
    return _shared


# ---------------------------------------------------------------- attaching claims to a pod template

def _claim_ref(entry: dict) -> tuple[ClaimKind, str] | None:
    """Which object a pod's ``resourceClaims[]`` entry names (1.31+ fields, or the older ``source``)."""
    given = entry.get("source")
    source: dict = given if isinstance(given, dict) else entry
    for field_name, kind in (("resourceClaimTemplateName", "ResourceClaimTemplate"),
                             ("resourceClaimName", "ResourceClaim")):
        name = source.get(field_name)
        if isinstance(name, str) and name:
            return kind, name  # type: ignore[return-value]
    return None


def _largest(request: DeviceRequest, accelerators: Accelerators) -> tuple[DeviceRequest, Profile] | None:
    """The alternative of ``request`` that holds the most accelerators (itself when it has none)."""
    best: tuple[int, DeviceRequest, Profile] | None = None
    for option in request.alternatives or (request,):
        profile = accelerators.for_device_class(option.device_class)
        if profile is None:
            continue  # not an accelerator class
        size = option.count if option.count is not None else (profile.max_per_node or 1)
        if best is None or size > best[0]:
            best = (size, option, profile)
    return (best[1], best[2]) if best is not None else None


def _floor(request: DeviceRequest) -> tuple[str, int] | None:
    """(class, count) the request needs whatever the scheduler picks: its exact count, or the smallest of its
    alternatives when all are exact counts of one class; ``None`` otherwise (allocationMode All, mixed classes)."""
    options = request.alternatives or (request,)
    classes = {o.device_class for o in options}
    counts = [o.count for o in options]
    if len(classes) != 1 or any(c is None for c in counts):
        return None
    return options[0].device_class, min(c for c in counts if c is not None)


def attach_claims(template: PodTemplate, namespace: str | None, accelerators: Accelerators,
                  claims: ClaimSource | None) -> None:
    """Count the devices of ``template``'s claims into it (and into the first container using each).

    A claim that can't be read goes to ``template.unjudged_claims`` as well as to the advisory
    list: the engine refuses such a pod unless the admin chose ``failureMode: open``.
    """

    source = claims if claims is not None else (_shared or UNCONFIGURED)
    users: dict[str, list] = {}
    for container in template.containers:
        res = container.resources()
        for _, use in dicts(res.get("claims") if res else None):
            if isinstance(use.get("name"), str):
                users.setdefault(use["name"], []).append((container, use.get("request")))
    for i, entry in dicts(template.spec.get("resourceClaims")):
        path = template.spec_path + ("resourceClaims", i)
        ref = _claim_ref(entry)
        claim_name = entry.get("name")
        if ref is None:
            problem = (path, f"resource claim {claim_name!r} names no ResourceClaim or ResourceClaimTemplate: "
                       "its devices are not counted")
            template.unresolved_claims.append(problem)
            template.unjudged_claims.append(problem)
            continue
        kind, name = ref
        requests = source.lookup(kind, namespace, name)
        if requests is None:
            problem = (path, f"{kind} {name} could not be resolved ({source.why_unknown()}): its devices are not "
                       "counted or checked")
            template.unresolved_claims.append(problem)
            template.unjudged_claims.append(problem)
            continue
        first_user = users.get(claim_name, [(None, None)])[0] if isinstance(claim_name, str) else (None, None)
        template.shares_claims = template.shares_claims or kind == "ResourceClaim"
        for request in requests:
            floor = _floor(request)
            if floor is not None and accelerators.for_device_class(floor[0]) is not None:
                template.claim_floor[floor[0]] = template.claim_floor.get(floor[0], 0) + floor[1]
            chosen = _largest(request, accelerators)
            if chosen is None:
                continue
            option, profile = chosen
            count = option.count
            if count is None:
                count = profile.max_per_node
                if count is None:
                    template.unresolved_claims.append((path, f"{kind} {name} asks for all devices of class "
                                                       f"{option.device_class}, and profile {profile.name} has "
                                                       "no maxPerNode: counted as 1"))
                    count = 1
            dc = option.device_class
            template.claim_devices[dc] = template.claim_devices.get(dc, 0) + count
            template.claim_profiles[dc] = profile
            user, only_request = first_user
            if user is not None and (only_request in (None, "", request.name)):
                user.claim_devices[dc] = user.claim_devices.get(dc, 0) + count
                user.claim_profiles[dc] = profile
