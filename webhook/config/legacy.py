"""Config keys from before accelerator profiles, and what happens to them on load.

Older configs held per-resource facts in global places: ``gpuResources`` (what counts),
``gpu-tolerations.tolerations``, ``gpu-node-affinity.gpuNodeLabel`` / ``preferredProducts``,
``default-resources.perGpu`` and ``gpu-request-shape.maxGpusPerNode``.  One global node label
or per-GPU size is exactly what broke TPU, Neuron and MIG pods, so those keys can't simply
keep working.  The rule, documented in ``docs/accelerators.md``:

- a key still holding the value gpuguard used to ship is dropped with a warning (the shipped
  accelerator profiles say the same thing, per resource), so an unedited old config loads;
- a key an admin changed is refused with ``file:line`` and where the setting lives now: a
  silent guess about which accelerators an edited global value was meant for would be worse.
"""

from __future__ import annotations

import copy
from typing import Any

_OLD_GPU_RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*", "amd.com/gpu",
                      "gpu.intel.com/*", "habana.ai/gaudi", "aws.amazon.com/neuron*", "google.com/tpu"]
_WHERE = "see docs/accelerators.md, 'Configs from before accelerator profiles'"


def _tol(t: Any) -> Any:
    if not isinstance(t, dict):
        return t
    return {"key": t.get("key"), "operator": t.get("operator", "Exists"), "value": t.get("value"),
            "effect": t.get("effect", "NoSchedule")}


def _same_tolerations(value: Any) -> bool:
    if not isinstance(value, dict) or set(value) != {"nvidia.com/gpu"} or not isinstance(value["nvidia.com/gpu"], list):
        return False
    return [_tol(t) for t in value["nvidia.com/gpu"]] == [_tol({"key": "nvidia.com/gpu"})]


def _same_label(value: Any) -> bool:
    return isinstance(value, dict) and value.get("key", "nvidia.com/gpu.present") == "nvidia.com/gpu.present" \
        and [str(v) for v in value.get("values", ["true"])] == ["true"] and set(value) <= {"key", "values"}


def _same_size(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    want = {"cpu": "8", "memory": "64Gi", "ephemeralStorage": "50Gi"}
    got = {("ephemeralStorage" if k == "ephemeral_storage" else k): str(v) for k, v in value.items()}
    return got == want


# policy id -> key -> (is the old shipped value?, where the setting lives now)
_POLICY_KEYS: dict[str, dict[str, tuple[Any, str]]] = {
    "gpu-tolerations": {"tolerations": (_same_tolerations, "each accelerator profile's `tolerations`")},
    "gpu-node-affinity": {
        "gpuNodeLabel": (_same_label, "each accelerator profile's `nodeSelection`"),
        "preferredProducts": (lambda v: v == [], "each accelerator profile's `preferred`"),
        "productLabel": (lambda v: v == "nvidia.com/gpu.product", "each accelerator profile's `preferred`"),
        "preferredWeight": (lambda v: v == 50, "each accelerator profile's `preferred[].weight`"),
    },
    "default-resources": {"perGpu": (_same_size, "each accelerator profile's `sizing`")},
    "gpu-request-shape": {"maxGpusPerNode": (lambda v: v == 8, "each accelerator profile's `maxPerNode`")},
}


class LegacyKeyError(ValueError):
    """An edited pre-profile key; ``loc`` is its key path for the line number."""

    def __init__(self, loc: tuple, message: str):
        super().__init__(message)
        self.loc = loc


def _policies(policies: Any, prefix: tuple, notes: list[tuple[tuple, str]]) -> None:
    if not isinstance(policies, dict):
        return
    for policy_id, keys in _POLICY_KEYS.items():
        settings = policies.get(policy_id)
        if not isinstance(settings, dict):
            continue
        for key, (is_old_default, where) in keys.items():
            if key not in settings:
                continue
            loc = prefix + (policy_id, key)
            if not is_old_default(settings[key]):
                raise LegacyKeyError(loc, f"per-resource settings moved to accelerator profiles: set {where} "
                                     f"in `accelerators:` instead ({_WHERE})")
            del settings[key]
            notes.append((loc, f"ignored: the shipped value of a pre-profile key; {where} now says this"))


def migrate(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[tuple, str]]]:
    """``data`` without pre-profile keys, and a note per key dropped; raises ``LegacyKeyError``."""
    notes: list[tuple[tuple, str]] = []
    if "gpuResources" not in data and not any(
            isinstance(p, dict) and any(isinstance(p.get(pid), dict) and set(p[pid]) & set(keys)
                                        for pid, keys in _POLICY_KEYS.items())
            for p in [data.get("policies")] + [pr.get("policies") for pr in data.get("profiles") or []
                                               if isinstance(pr, dict)]):
        return data, notes  # the common case: nothing to copy
    data = copy.deepcopy(data)
    if "gpuResources" in data:
        if data["gpuResources"] != _OLD_GPU_RESOURCES:
            raise LegacyKeyError(("gpuResources",), "replaced by `accelerators:` (one profile per resource name or "
                                 f"DRA DeviceClass; {_WHERE})")
        del data["gpuResources"]
        notes.append((("gpuResources",), "ignored: the shipped list; the accelerator profiles now say what counts"))
    _policies(data.get("policies"), ("policies",), notes)
    for i, profile in enumerate(data.get("profiles") or []):
        if isinstance(profile, dict):
            _policies(profile.get("policies"), ("profiles", i, "policies"), notes)
    return data, notes
