"""gpu-tolerations: pods that request a GPU get the tolerations of their GPU nodes' taints.

GPU node pools are tainted (``nvidia.com/gpu:NoSchedule`` and similar) so that CPU pods
stay off them; a GPU pod without the toleration pends forever.  An existing toleration
that already covers the taint (equal or wider: empty key with Exists, same key with
Exists, or the same key=value) is left alone, so reinvocation and the apiserver's
ExtendedResourceToleration plugin never pile up duplicates.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Literal

from pydantic import Field

from policies.base import ConfigModel, MutatingPolicy, PolicySettings
from workloads.paths import child_list, dicts
from workloads.view import WorkloadView


class Toleration(ConfigModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Exists"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = "NoSchedule"

    def as_k8s(self) -> dict:
        return self.model_dump(exclude_none=True)


class Settings(PolicySettings):
    tolerations: dict[str, list[Toleration]] = Field(
        default_factory=lambda: {"nvidia.com/gpu": [Toleration(key="nvidia.com/gpu")]},
        description="GPU resource name (or glob) -> tolerations its pods get.",
    )


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
        resources = {r for c in template.containers for r in c.gpus}
        wanted = [
            tol.as_k8s()
            for pattern, tols in settings.tolerations.items()
            if any(fnmatchcase(r, pattern) for r in resources)
            for tol in tols
        ]
        if not wanted:
            continue
        tolerations = child_list(template.spec, "tolerations")
        if tolerations is None:
            continue
        for tol in wanted:
            if not any(covers(existing, tol) for _, existing in dicts(tolerations)):
                tolerations.append(tol)
                changed = True
    return changed


POLICY = MutatingPolicy(
    id="gpu-tolerations",
    title="Tolerate the taints of GPU nodes",
    settings_model=Settings,
    run=mutate,
    description="Adds the tolerations configured for each GPU resource to pods that request it, "
    "unless an equal or wider toleration is already there.",
    rationale="GPU node pools are tainted to keep CPU pods off; a GPU pod without the toleration pends "
    "forever while its job's clock runs.",
    example="""\
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: ml}
spec:
  restartPolicy: Never
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  containers:
  - name: trainer
    image: ghcr.io/example/train:1
    resources:
      limits: {nvidia.com/gpu: 1}
""",
)
