"""gpu-tolerations: pods that request an accelerator get the tolerations of its nodes' taints.

Accelerator node pools are tainted (by convention with the resource name as the key) so that
CPU pods stay off them; a pod without the toleration pends forever.  Which tolerations an
accelerator needs is its profile's ``tolerations`` (``workloads/accelerators.py``): a TPU pod
gets the TPU taint's, never a GPU's.  An existing toleration
that already covers the taint (equal or wider: empty key with Exists, same key with
Exists, or the same key=value) is left alone, so reinvocation and the apiserver's
ExtendedResourceToleration plugin never pile up duplicates.
"""

from __future__ import annotations

from gpuguard.policies.base import MutatingPolicy, PolicySettings, accelerator_objects_only
from gpuguard.workloads.paths import child_list, dicts
from gpuguard.workloads.view import WorkloadView


class Settings(PolicySettings):
    """Only the action: which tolerations an accelerator needs is its profile's ``tolerations``."""


def covers(existing: dict, wanted: dict) -> bool:
    """Whether ``existing`` tolerates every taint that ``wanted`` tolerates."""
    effect = existing.get("effect")
    if effect and effect != wanted.get("effect"):
        return False
    operator = existing.get("operator") or "Equal"
    key = existing.get("key")
    if not key:
        return operator == "Exists"
    if key != wanted.get("key"):
        return False
    if operator == "Exists":
        return True
    return wanted.get("operator") == "Equal" and existing.get("value", "") == wanted.get("value", "")


def mutate(view: WorkloadView, settings: Settings) -> bool:
    changed = False
    for template in view.gpu_templates:
        wanted = [tol for profile in template.profiles for tol in profile.tolerations]
        if not wanted:
            continue
        tolerations = child_list(template.spec, "tolerations")
        if tolerations is None:
            continue
        before = len(tolerations)
        for tol in wanted:
            if not any(covers(existing, tol) for _, existing in dicts(tolerations)):
                tolerations.append(tol)
                changed = True
        # A list without merge keys: client-side diffs see the user's list grown.  On a bare Pod the
        # apiserver's own admission (DefaultTolerationSeconds) filled it, not the user.
        if before and len(tolerations) > before and not view.kind.is_pod \
                and not view.inherits(template, "tolerations"):
            view.extended((*template.spec_path, "tolerations"), before, len(tolerations))
    return changed


POLICY = MutatingPolicy(
    id="gpu-tolerations",
    title="Tolerate the taints of GPU nodes",
    settings_model=Settings,
    run=mutate,
    description="Adds the tolerations of each accelerator profile (docs/accelerators.md) a pod uses, by extended "
    "resource or DRA claim (e.g. `nvidia.com/gpu`, `google.com/tpu`, `aws.amazon.com/neuron` Exists NoSchedule), "
    "unless an equal or wider toleration is already there.",
    rationale="GPU node pools are tainted to keep CPU pods off; a GPU pod without the toleration pends "
    "forever while its job's clock runs.",
    cpu_scope=accelerator_objects_only,
    writes=("tolerations",),
)
