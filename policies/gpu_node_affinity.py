"""gpu-node-affinity: GPU pods require GPU nodes; optionally, CPU pods keep off them.

``nodeSelectorTerms`` are ORed, so the GPU expression goes into *every* term: appending it
to one term only lets the other terms schedule the pod anywhere (a trap seen in peers'
code).  A term that already constrains the label is the user's and is left alone.
"""

from __future__ import annotations

from pydantic import Field

from policies.base import ConfigModel, MutatingPolicy, PolicySettings
from workloads.paths import child_dict, child_list, dicts
from workloads.view import PodTemplate, WorkloadView


class NodeLabel(ConfigModel):
    key: str = "nvidia.com/gpu.present"
    values: list[str] = Field(default_factory=lambda: ["true"])


class Settings(PolicySettings):
    gpu_node_label: NodeLabel = Field(default_factory=NodeLabel,
                                      description="Label every GPU node carries (GPU feature discovery).")
    preferred_products: list[str] = Field(default_factory=list,
                                          description="Preferred values of product_label (soft affinity).")
    product_label: str = "nvidia.com/gpu.product"
    preferred_weight: int = Field(50, ge=1, le=100)
    keep_non_gpu_pods_off: bool = Field(False, description="Give pods without GPUs a NotIn expression on the "
                                        "GPU label, so they leave GPU nodes to GPU work.")


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
        terms.append({})
    changed = False
    for _, term in dicts(terms):
        exprs = child_list(term, "matchExpressions")
        if exprs is not None and not any(e.get("key") == expression["key"] for _, e in dicts(exprs)):
            exprs.append(dict(expression, values=list(expression["values"])))
            changed = True
    return changed


def _prefer(template: PodTemplate, settings: Settings) -> bool:
    affinity = child_dict(template.spec, "affinity")
    node_affinity = child_dict(affinity, "nodeAffinity")
    preferred = child_list(node_affinity, "preferredDuringSchedulingIgnoredDuringExecution")
    if preferred is None:
        return False
    for _, entry in dicts(preferred):
        pref = entry.get("preference")
        exprs = pref.get("matchExpressions") if isinstance(pref, dict) else None
        if any(e.get("key") == settings.product_label for _, e in dicts(exprs)):
            return False
    preferred.append({"weight": settings.preferred_weight, "preference": {"matchExpressions": [
        {"key": settings.product_label, "operator": "In", "values": list(settings.preferred_products)}]}})
    return True


def mutate(view: WorkloadView, settings: Settings) -> bool:
    label = settings.gpu_node_label
    changed = False
    for template in view.templates:
        if template.gpus_per_pod:
            changed |= _add_to_every_term(template, {"key": label.key, "operator": "In", "values": label.values})
            if settings.preferred_products:
                changed |= _prefer(template, settings)
        elif settings.keep_non_gpu_pods_off:
            changed |= _add_to_every_term(template, {"key": label.key, "operator": "NotIn", "values": label.values})
    return changed


POLICY = MutatingPolicy(
    id="gpu-node-affinity",
    title="Require GPU nodes for GPU pods",
    settings_model=Settings,
    run=mutate,
    description="Adds a required node-affinity expression on the GPU node label to every nodeSelectorTerm "
    "of GPU pods, an optional preferred GPU product, and optionally keeps CPU pods off GPU nodes.",
    rationale="Without it a GPU pod can wait on CPU-only nodes the autoscaler keeps adding, and CPU pods "
    "can fill the GPU nodes' CPU and memory so GPUs sit idle.",
    example="""\
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: ml}
spec:
  restartPolicy: Never
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - {key: nvidia.com/gpu.present, operator: In, values: ["true"]}
  containers:
  - name: trainer
    image: ghcr.io/example/train:1
    resources:
      limits: {nvidia.com/gpu: 1}
""",
)
