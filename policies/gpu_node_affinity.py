"""gpu-node-affinity: accelerator pods go to nodes that have their accelerator, by labels those nodes really have.

Which labels mark accelerator nodes depends on the cluster: NVIDIA's feature discovery sets
``nvidia.com/gpu.present``, GKE's own driver install does not (its nodes carry
``cloud.google.com/gke-accelerator``), Karpenter nodes carry ``karpenter.k8s.aws/instance-gpu-name``.
A *required* term on a label no node carries makes the pod pend forever, so:

- with a node inventory (``workloads/inventory.py``), the expression is learned from the nodes and
  pools offering the pod's accelerator resources: a label all of them carry and no other node may
  match; none is added when the pod's own selection already keeps it on such nodes, or when no
  label tells them apart (the resource request alone places the pod);
- without one, the profile's ``nodeSelection`` goes in as a *preferred* term, unless the admin
  marked it ``required`` in the profile, and nothing is added when the pod already selects by an
  accelerator label of some profile or product.

Right-size placement: with an inventory, a pod that names no accelerator type *prefers* (weight 50, never
requires) the node group with the fewest devices per node among those that hold it, by a product label that
tells that group apart, so 1-, 2- and 4-GPU pods leave the 8-GPU nodes whole for the gangs that need them.

``nodeSelectorTerms`` are ORed, so a required expression goes into *every* term: appending it to
one term only lets the other terms schedule the pod anywhere (a trap seen in peers' code).  A
term that already constrains the label is the user's and is left alone, and so is an empty term:
it matches no node, and adding an expression would widen it to every accelerator node.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache

import orjson
from pydantic import Field

from gpuguard.policies.base import CpuScope, MutatingPolicy, PolicySettings, cpu_objects_if
from gpuguard.workloads.accelerators import Accelerators
from gpuguard.workloads.inventory import Inventory, NodeGroup
from gpuguard.workloads.paths import child_dict, child_list, dicts
from gpuguard.workloads.prices import PRODUCT_LABELS
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    keep_non_gpu_pods_off: bool = Field(False, description="Give pods without accelerators the negation of "
                                        "every profile's node selection, so they leave accelerator nodes to "
                                        "accelerator work.")


# Where a pod spec keeps its required node selection terms.
_REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


def _add_to_every_term(view: WorkloadView, template: PodTemplate, expression: dict) -> bool:
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
    for i, term in dicts(terms):
        if not term.get("matchExpressions") and not term.get("matchFields"):
            continue  # an empty term matches no node: the user's (odd) choice, not ours to widen
        exprs = child_list(term, "matchExpressions")
        if exprs is not None and not any(e.get("key") == expression["key"] for _, e in dicts(exprs)):
            exprs.append({k: list(v) if isinstance(v, list) else v for k, v in expression.items()})
            changed = True
            # the user's own term grew (a list without merge keys: client-side diffs see it)
            view.extended((*template.spec_path, *_REQUIRED, i, "matchExpressions"), len(exprs) - 1, len(exprs),
                          users=True)
    return changed


def _prefer(view: WorkloadView, template: PodTemplate, key: str, values: list[str], weight: int) -> bool:
    return _prefer_expression(view, template, {"key": key, "operator": "In", "values": list(values)}, weight)


def _negations(view: WorkloadView) -> list[dict]:
    """One expression per distinct node selection of the configured profiles, negated."""
    out: dict[str, dict] = {}
    for profile in view.accelerators.profiles if view.accelerators else ():
        if profile.node_selection is not None:
            out.setdefault(profile.node_selection.key, profile.node_selection.negated())
    return list(out.values())


def _required_terms(template: PodTemplate) -> list | None:
    affinity = template.spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_affinity, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    return terms if isinstance(terms, list) and terms else None


def _selected_keys(template: PodTemplate) -> set[str]:
    """Label keys the pod's nodeSelector and required node affinity already constrain."""
    keys: set[str] = set()
    node_selector = template.spec.get("nodeSelector")
    if isinstance(node_selector, dict):
        keys.update(str(k) for k in node_selector)
    for _, term in dicts(_required_terms(template)):
        keys.update(str(e.get("key")) for _, e in dicts(term.get("matchExpressions")))
    return keys


def _hints(view: WorkloadView) -> list[str]:
    """Accelerator label keys: every profile's own, then the product labels (a ranking, never a rule)."""
    return _hints_of(view.accelerators)


@lru_cache(maxsize=8)  # per compiled profile list (a config), not per review
def _hints_of(accelerators: Accelerators | None) -> list[str]:
    keys = [p.node_selection.key for p in (accelerators.profiles if accelerators else ())
            if p.node_selection is not None]
    return list(dict.fromkeys([*keys, *PRODUCT_LABELS]))


def _from_inventory(view: WorkloadView, template: PodTemplate, inventory: Inventory, hints: list[str]) -> bool:
    resources = sorted(r for r in template.effective_gpus if "/" in r)
    if not resources:
        return False
    node_selector = template.spec.get("nodeSelector")
    terms = _required_terms(template)
    key = ("affinity", tuple(resources), orjson.dumps((node_selector, terms), default=str,
                                                       option=orjson.OPT_NON_STR_KEYS))
    changed = False
    # Unless the pod's own selection already keeps it on nodes with its accelerator (or on none), a learned label.
    if not inventory.memo(key, lambda: _kept_on_eligible(inventory, resources, node_selector, terms)):
        expression = inventory.selection_for(resources, hints)
        changed = expression is not None and _add_to_every_term(view, template, expression)
    return _right_size(view, template, inventory, resources, hints) or changed


def _right_size(view: WorkloadView, template: PodTemplate, inventory: Inventory, resources: list[str],
                hints: list[str]) -> bool:
    """A pod that names no accelerator type prefers (never requires) the smallest node group that holds it, so
    1-, 2- and 4-GPU pods leave the 8-GPU nodes whole for the work that needs them."""
    if _selected_keys(template) & set(hints):
        return False  # the user chose a type (or a product)
    node_selector, terms = template.node_selection()
    tolerations = template.spec.get("tolerations")
    key = ("right-size", tuple((r, template.effective_gpus[r]) for r in resources),
           orjson.dumps((node_selector, terms, tolerations), default=str, option=orjson.OPT_NON_STR_KEYS))
    expression = inventory.memo(key, lambda: _smallest_group_expression(
        inventory, resources, template.effective_gpus, node_selector, terms,
        tolerations if isinstance(tolerations, list) else []))
    return expression is not None and _prefer_expression(view, template, expression, 50)


def _smallest_group_expression(inventory: Inventory, resources: list[str], per_pod: dict[str, int],
                               node_selector: dict | None, terms: list | None, tolerations: list) -> dict | None:
    """A product label expression for the group with the fewest devices per node among those the pod fits on,
    when the groups differ by product (else the scheduler has nothing to choose between)."""
    groups = [g for g in inventory.eligible(resources) if g.shape_known and not g.cordoned
              and all((g.amount(r) or 0) >= per_pod[r] for r in resources)
              and g.matches(node_selector, terms) and not g.untolerated(tolerations)]
    def devices(group: NodeGroup) -> Decimal:
        return sum((group.amount(r) or Decimal(0) for r in resources), Decimal(0))

    if len(groups) < 2:
        return None
    smallest = min(groups, key=lambda g: (devices(g), g.name))
    if devices(smallest) == max(devices(g) for g in groups):
        return None  # all alike: nothing to leave whole
    for label in PRODUCT_LABELS:  # a label that tells the smallest group apart from every other
        values = smallest.labels.get(label)
        others = [g.labels.get(label) for g in groups if g is not smallest]
        if values is not None and len(values) == 1 and all(o is not None and not values & o for o in others):
            return {"key": label, "operator": "In", "values": sorted(values)}
    return None


def _kept_on_eligible(inventory: Inventory, resources: list[str], node_selector: object, terms: list | None) -> bool:
    """Whether every node group the pod's own selection may land on offers its accelerators."""
    eligible = {id(g) for g in inventory.eligible(resources)}
    selector = node_selector if isinstance(node_selector, dict) else None
    return all(id(g) in eligible for g in inventory.groups if g.matches(selector, terms))


def _from_profiles(view: WorkloadView, template: PodTemplate, hints: list[str]) -> bool:
    """No inventory: the profiles' picture, as a preference unless the admin made it required."""
    changed = False
    selected = _selected_keys(template) & set(hints)
    for profile in template.profiles:
        selection = profile.node_selection
        if selection is None:
            continue
        if selection.required:
            changed |= _add_to_every_term(view, template, selection.expression())
        elif not selected:
            changed |= _prefer_expression(view, template, selection.expression(), 100)
    return changed


def _prefer_expression(view: WorkloadView, template: PodTemplate, expression: dict, weight: int) -> bool:
    affinity = child_dict(template.spec, "affinity")
    node_affinity = child_dict(affinity, "nodeAffinity")
    preferred = child_list(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution")
    if preferred is None:
        return False
    for _, entry in dicts(preferred):
        pref = entry.get("preference")
        exprs = pref.get("matchExpressions") if isinstance(pref, dict) else None
        if any(e.get("key") == expression["key"] for _, e in dicts(exprs)):
            return False
    preferred.append({"weight": weight, "preference": {"matchExpressions": [dict(expression)]}})
    view.extended((*template.spec_path, "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
                  len(preferred) - 1, len(preferred))
    return True


def mutate(view: WorkloadView, settings: Settings) -> bool:
    changed = False
    hints = view.inventory.memo(("hints", id(view.accelerators)), lambda: _hints(view)) if view.inventory.known \
        else _hints(view)
    for template in view.templates:
        if template.gpus_per_pod:
            if view.inventory.known:
                changed |= _from_inventory(view, template, view.inventory, hints)
            else:
                changed |= _from_profiles(view, template, hints)
            for profile in template.profiles:
                for pref in profile.spec.preferred:
                    changed |= _prefer(view, template, pref.key, pref.values, pref.weight)
        elif settings.keep_non_gpu_pods_off:
            for expression in _negations(view):
                changed |= _add_to_every_term(view, template, expression)
    return changed


def cpu_scope(settings: Settings) -> CpuScope:
    """Pods without accelerators too when ``keepNonGpuPodsOff`` is on."""
    return cpu_objects_if(settings.keep_non_gpu_pods_off)


POLICY = MutatingPolicy(
    id="gpu-node-affinity",
    title="Require accelerator nodes for accelerator pods",
    settings_model=Settings,
    run=mutate,
    description="Keeps accelerator pods on nodes that have their accelerator, by labels those nodes really carry: "
    "with a node inventory (docs/inventory.md) a label learned from the nodes and pools offering "
    "the resource (e.g. `cloud.google.com/gke-accelerator` on GKE, `nvidia.com/gpu.present` under the GPU Operator), "
    "added to every non-empty nodeSelectorTerm unless the pod's own selection already keeps it there, and, for a pod "
    "that names no accelerator type, a preference (never a requirement) for the smallest node group that holds it, "
    "so small pods leave the big nodes whole; without one, "
    "the profile's node selection as a preferred term (required only where the admin's profile says so); "
    "optionally keeps pods without accelerators off accelerator nodes.",
    rationale="Without it a GPU pod can wait on CPU-only nodes the autoscaler keeps adding, and CPU pods "
    "can fill the GPU nodes' CPU and memory so GPUs sit idle.",
    cpu_scope=cpu_scope,
    writes=("affinity.nodeAffinity",),
)
