"""Knative-served pod templates: gpuguard adds no pod field Knative would refuse.

In KServe's Serverless (Knative) mode an InferenceService component becomes a Knative Service,
and Knative's webhook refuses pod fields whose ``config-features`` flag is off, which it is by
default for ``affinity``, ``tolerations``, ``nodeSelector``, ``priorityClassName``,
``runtimeClassName``, ``schedulerName`` and ``initContainers`` (KServe's own Knative install
enables none of them).  The InferenceService itself would be accepted and its predictor would
then fail to reconcile with "must not set the field(s)", an error only the controller sees.

So for such templates the engine takes back what a mutating policy added there, and says so as
a warning of that policy, with the flag an admin turns on (``kserve.knativeFeatures``) or the
deployment mode to use.  Resources and emptyDir volumes are allowed by Knative's defaults.
"""

from __future__ import annotations

import copy
from typing import Any

from gpuguard.workloads.paths import Path, dotted

# Pod spec field -> the Knative feature flag that allows it (all Disabled by default).
GATED_FIELDS: dict[str, str] = {
    "affinity": "kubernetes.podspec-affinity",
    "tolerations": "kubernetes.podspec-tolerations",
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "initContainers": "kubernetes.podspec-init-containers",
}


def gated(enabled: frozenset[str]) -> tuple[str, ...]:
    """The pod fields Knative refuses on this cluster: those whose flag is not listed as enabled."""
    return tuple(name for name, flag in GATED_FIELDS.items() if flag not in enabled and name not in enabled)


def snapshot(spec: dict, fields: tuple[str, ...]) -> dict[str, Any]:
    """The gated fields of a pod spec as they are now (absent ones omitted)."""
    return {name: copy.deepcopy(spec[name]) for name in fields if name in spec}


def take_back(spec: dict, before: dict[str, Any], fields: tuple[str, ...]) -> list[str]:
    """Restore the gated fields a policy changed since ``before``; the names of those restored."""
    restored = []
    for name in fields:
        if spec.get(name) == before.get(name):
            continue
        if name in before:
            spec[name] = before[name]
        else:
            spec.pop(name, None)
        restored.append(name)
    return restored


def message(spec_path: Path, restored: list[str]) -> tuple[str, str]:
    """The warning's message and fix."""
    flags = ", ".join(f"{GATED_FIELDS[name]}" for name in restored)
    fields = ", ".join(restored)
    return (f"{dotted(spec_path)} is served by Knative, which refuses {fields} unless its config-features enable "
            f"them, so gpuguard did not set them",
            f"enable {flags} in Knative's config-features and list them in gpuguard's kserve.knativeFeatures, "
            "or deploy with serving.kserve.io/deploymentMode: RawDeployment")
