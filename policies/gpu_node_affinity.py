"""gpu-node-affinity: accelerator pods require nodes that have their accelerator; optionally, CPU pods keep off.

Which nodes have an accelerator is its profile's ``nodeSelection`` (``workloads/accelerators.py``):
a TPU pod requires the TPU label, a MIG pod the mixed-strategy label, and a profile with no
selection (the scheduler already places a pod only where its resource is allocatable, or
DRA ResourceSlices do) adds nothing.  ``nodeSelectorTerms`` are ORed, so an expression goes
into *every* term: appending it to one term only lets the other terms schedule the pod
anywhere (a trap seen in peers' code).  A term that already constrains the label is the
user's and is left alone, and so is an empty term: it matches no node, and adding an
expression would widen it to every accelerator node.
"""

from __future__ import annotations

from pydantic import Field

from gpuguard.policies.base import CpuScope, MutatingPolicy, PolicySettings, cpu_objects_if
from gpuguard.workloads.paths import child_dict, child_list, dicts
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    keep_non_gpu_pods_off: bool = Field(False, description="Give pods without accelerators the negation of "
                                        "every profile's node selection, so they leave accelerator nodes to "
                                        "accelerator work.")


def _add_to_every_term(template: PodTemplate, expression: dict) -> bool:
    node_selector = template.spec.get("nodeSelector")
    if isinstance(node_selector, dict) and expression["key"] in node_selector:
        return False  # the user's nodeSelector already decides this label
    affinity = child_dict(template.spec, "affinity")
    node_affinity = child_dict(affinity, "nodeAffinity")
    required = child_dict(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = child_list(required, "nodeSelectorTerms")
    if terms is None:
        return False
    if not terms:
        terms.append({"matchExpressions": [dict(expression)]})
        return True
    changed = False
    for _, term in dicts(terms):
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue  # an empty term matches no node: the user's (odd) choice, not ours to widen
        exprs = child_list(term, "matchExpressions")
        if exprs is not None and not any(e.get("key") == expression["key"] for _, e in dicts(exprs)):
            exprs.append({k: list(v) if isinstance(v, list) else v for k, v in expression.items()})
            changed = True
    return changed


def _prefer(template: PodTemplate, key: str, values: list[str], weight: int) -> bool:
    affinity = child_dict(template.spec, "affinity")
    node_affinity = child_dict(affinity, "nodeAffinity")
    preferred = child_list(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution")
    if preferred is None:
        return False
    for _, entry in dicts(preferred):
        pref = entry.get("preference")
        exprs = pref.get("matchExpressions") if isinstance(pref, dict) else None
        if any(e.get("key") == key for _, e in dicts(exprs)):
            return False
    preferred.append({"weight": weight, "preference": {"matchExpressions": [
        {"key": key, "operator": "In", "values": list(values)}]}})
    return True


def _negations(view: WorkloadView) -> list[dict]:
    """One expression per distinct node selection of the configured profiles, negated."""
    out: dict[str, dict] = {}
    for profile in view.accelerators.profiles if view.accelerators else ():
        if profile.node_selection is not None:
            out.setdefault(profile.node_selection.key, profile.node_selection.negated())
    return list(out.values())


def mutate(view: WorkloadView, settings: Settings) -> bool:
    changed = False
    for template in view.templates:
        if template.gpus_per_pod:
            for profile in template.profiles:
                if profile.node_selection is not None:
                    changed |= _add_to_every_term(template, profile.node_selection.expression())
                for pref in profile.spec.preferred:
                    changed |= _prefer(template, pref.key, pref.values, pref.weight)
        elif settings.keep_non_gpu_pods_off:
            for expression in _negations(view):
                changed |= _add_to_every_term(template, expression)
    return changed


def cpu_scope(settings: Settings) -> CpuScope:
    """Pods without accelerators too when ``keepNonGpuPodsOff`` is on."""
    return cpu_objects_if(settings.keep_non_gpu_pods_off)


POLICY = MutatingPolicy(
    id="gpu-node-affinity",
    title="Require accelerator nodes for accelerator pods",
    settings_model=Settings,
    run=mutate,
    description="Adds each accelerator profile's node selection (TPU pods: `cloud.google.com/gke-tpu-accelerator`; "
    "whole NVIDIA GPUs: `nvidia.com/gpu.present=true`; MIG: `nvidia.com/mig.strategy=mixed`; none for Neuron, Gaudi, "
    "DRA) to every non-empty nodeSelectorTerm of pods that use it, and its preferred nodes as soft affinity; "
    "optionally keeps pods without accelerators off accelerator nodes.",
    rationale="Without it a GPU pod can wait on CPU-only nodes the autoscaler keeps adding, and CPU pods "
    "can fill the GPU nodes' CPU and memory so GPUs sit idle.",
    cpu_scope=cpu_scope,
)
