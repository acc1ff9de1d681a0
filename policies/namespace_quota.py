"""namespace-quota: accelerators the namespace's ResourceQuota can never admit.

A ResourceQuota's ``hard`` limit on an accelerator (``requests.nvidia.com/gpu``) or on a DRA DeviceClass's devices
(``gpu.nvidia.com.deviceclass.resource.k8s.io/devices``, charged when each pod's ResourceClaim is made) refuses every
pod, or claim, past it.  The apiserver accepts the workload anyway: a Job whose pod asks more than the limit never
gets a pod; a gang whose pods together ask more starts the pods that fit, which hold their accelerators and wait
at the first collective for peers the quota refuses.  Judged only on evidence: the quotas listed from the
namespace (the webhook: cached, listed before the review; ``gpuguard audit``: ResourceQuota objects in the input or
the cluster), unscoped ones only (a scoped quota applies to the pods its scopes select), their ``hard`` limits,
never what is ``used`` now (capacity in use comes and goes).  Per pod: the accelerators it asks, and the fewest
devices its claim templates need for sure (a ResourceClaim shared by several pods is charged once, when it is made,
and is not counted here).  A workload whose pods run apart (a Deployment's replicas) runs fewer at once: a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads import quantity
from gpuguard.workloads.paths import dotted
from gpuguard.workloads.view import PodTemplate, WorkloadView

# The quota resource name of a DeviceClass's devices (kube's V1ResourceByDeviceClass).
DEVICE_CLASS_SUFFIX = ".deviceclass.resource.k8s.io/devices"


class Settings(PolicySettings):
    pass


@dataclass(frozen=True)
class _Limit:
    """The lowest hard limit of one quota resource among the namespace's unscoped quotas, and which quota sets it."""

    key: str
    hard: Decimal
    quota: str


def _limits(view: WorkloadView) -> dict[str, _Limit]:
    """Quota resource name -> its lowest hard limit; empty where the namespace's quotas can't be listed."""
    if view.list_objects is None or not view.namespace:
        return {}
    quotas = view.list_objects("", "ResourceQuota", view.namespace) or []
    out: dict[str, _Limit] = {}
    for quota in quotas:
        spec = _mapping(quota.get("spec"))
        if spec.get("scopes") or spec.get("scopeSelector"):
            continue  # applies only to the pods its scopes select
        hard = spec.get("hard")
        meta = _mapping(quota.get("metadata"))
        name = str(meta.get("name") or "?")
        for key, raw in (hard.items() if isinstance(hard, dict) else ()):
            value = quantity.parse(raw)
            if isinstance(key, str) and value is not None and (key not in out or value < out[key].hard):
                out[key] = _Limit(key, value, name)
    return out


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _per_pod(template: PodTemplate) -> dict[str, int]:
    """Quota resource name -> what one pod of the template is charged for sure."""
    out = {f"requests.{name}": count for name, count in template.effective_gpus.items() if "/" in name and count}
    if not template.shares_claims:
        out.update({f"{device_class}{DEVICE_CLASS_SUFFIX}": n for device_class, n in template.claim_floor.items() if n})
    return out


def _fix(limit: _Limit) -> str:
    return (f"ask for at most {limit.hard} per pod and in all (or fewer pods), or ask the admin to raise "
            f"ResourceQuota {limit.quota}'s hard {limit.key}")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    limits = _limits(view)
    if not limits:
        return
    totals: dict[str, int] = {}
    pods_of: dict[str, int] = {}  # key -> the pods of the templates asking it
    for template, pods in view.running_templates():
        for key, per_pod in _per_pod(template).items():
            limit = limits.get(key)
            if limit is None:
                continue
            if per_pod > limit.hard:
                yield Finding(template.spec_path, f"a pod of {dotted(template.spec_path)} asks {per_pod} of {key}, "
                              f"more than ResourceQuota {limit.quota} allows in namespace {view.namespace} "
                              f"({limit.hard}): no pod of it can ever be created", _fix(limit))
                continue
            totals[key] = totals.get(key, 0) + per_pod * pods
            pods_of[key] = pods_of.get(key, 0) + pods
    together = view.kind.gang is not None and view.pod_count() > 1
    for key, total in totals.items():
        limit = limits[key]
        if total <= limit.hard:
            continue
        pods = pods_of[key]
        if together:
            yield Finding(("spec",), f"its {pods} pods must run together and ask {total} of {key} in all, more than "
                          f"ResourceQuota {limit.quota} allows in namespace {view.namespace} ({limit.hard}): the "
                          "pods that fit start and hold their accelerators while the rest are refused", _fix(limit))
        else:
            yield Finding(("spec",), f"its {pods} pods ask {total} of {key} in all, more than ResourceQuota "
                          f"{limit.quota} allows in namespace {view.namespace} ({limit.hard}): fewer run at once",
                          _fix(limit), advisory=True)


POLICY = ValidatingPolicy(
    id="namespace-quota",
    title="Within the namespace's ResourceQuota",
    settings_model=Settings,
    run=validate,
    description="Denies a workload whose pod asks more accelerators (requests.<resource>) or DRA devices of a "
    "DeviceClass (<class>.deviceclass.resource.k8s.io/devices) than the namespace's ResourceQuota hard limit allows, "
    "and a distributed job whose pods, which must run together, ask more in all; warns where other pods would only "
    "run fewer at once. Unscoped quotas only, hard limits only (never what is used now).",
    rationale="The apiserver accepts the workload and refuses its pods one by one: a Job that never gets a pod, "
    "or a gang whose admitted pods hold their accelerators waiting for peers the quota refuses.",
    cpu_scope=accelerator_objects_only,
)
