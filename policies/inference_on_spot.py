"""inference-on-spot: inference on spot/preemptible GPU nodes gets a warning.

Spot capacity is 70-90% cheaper and can be taken back at any moment (often with 30 s
notice): fine for checkpointed training, an outage for a model server.  It is a warning,
not a denial, because some teams accept it for canaries or batch inference.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Action, Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.classify import relabel
from gpuguard.workloads.paths import dicts
from gpuguard.workloads.view import PodTemplate, WorkloadView


class Settings(PolicySettings):
    action: Action = "warn"
    spot_labels: dict[str, str] = Field(
        default_factory=lambda: {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-preemptible": "true",
                                 "eks.amazonaws.com/capacityType": "SPOT", "karpenter.sh/capacity-type": "spot",
                                 "kubernetes.azure.com/scalesetpriority": "spot"},
        description="Node label -> value that marks spot/preemptible nodes (also taint keys).")
    classes: list[str] = Field(default_factory=lambda: ["inference"])


def _spot_choices(template: PodTemplate, settings: Settings) -> Iterator[tuple[str, str]]:
    selector = template.spec.get("nodeSelector")
    if isinstance(selector, dict):
        for key, value in selector.items():
            if settings.spot_labels.get(key) == value:
                yield "nodeSelector", f"{key}={value}"
    affinity = template.spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node_affinity, dict) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    for _, term in dicts(terms):
        for _, expr in dicts(term.get("matchExpressions")):
            key = expr.get("key")
            given = expr.get("values")
            values = given if isinstance(given, list) else []
            if key in settings.spot_labels and (
                    expr.get("operator") == "Exists" or
                    (expr.get("operator") == "In" and settings.spot_labels[key] in values)):
                yield "affinity", f"{key}"
    for _, tol in dicts(template.spec.get("tolerations")):
        if tol.get("key") in settings.spot_labels:
            yield "tolerations", f"{tol.get('key')}"


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    if view.workload_class not in settings.classes or not view.is_gpu:
        return
    for template in view.gpu_templates:
        for field, label in _spot_choices(template, settings):
            # kubectl shows about 256 characters of a warning: the class and its label come before the rest.
            yield Finding(template.spec_path + (field,), f"inference on spot nodes ({label}): they can be reclaimed "
                          "at any time, taking the model offline",
                          relabel(view.workload_class, (("batch-inference", "batch work"),))
                          + "; else use on-demand nodes, or keep enough on-demand replicas")


POLICY = ValidatingPolicy(
    id="inference-on-spot",
    title="No inference on spot GPU nodes",
    settings_model=Settings,
    run=validate,
    description="Warns when an inference workload selects (nodeSelector, node affinity) or tolerates "
    "spot/preemptible nodes.",
    rationale="Spot nodes are reclaimed with seconds of notice: cheap for checkpointed training, an outage for "
    "a model server.",
    cpu_scope=accelerator_objects_only,
)
