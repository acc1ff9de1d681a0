"""gpu-request-shape: GPU requests a scheduler can satisfy, caught at admission.

Extended resources are whole numbers that can't be overcommitted: a request must equal
its limit.  The apiserver checks that when a Pod is created, not when a PyTorchJob or
JobSet is, so a bad template in a custom resource only fails later, pod by pod, while the
other pods hold GPUs.  A pod asking for more GPUs than the largest node has (or a
workload over the configured total) pends forever.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from pydantic import Field

from policies.base import Finding, PolicySettings, ValidatingPolicy
from workloads import quantity
from workloads.view import Container, PodTemplate, WorkloadView


class Settings(PolicySettings):
    max_gpus_per_node: int = Field(8, ge=1, description="GPUs of the largest GPU node.")
    max_gpus_per_workload: int | None = Field(64, ge=1, description="GPUs one workload may ask for in all.")
    max_cpu_per_node: str | None = Field(None, description="Allocatable CPU of the largest GPU node.")
    max_memory_per_node: str | None = Field(None, description="Allocatable memory of the largest GPU node.")


def _when(view: WorkloadView) -> str:
    if view.kind.validated_by_apiserver:
        return "the apiserver rejects the pod"
    return f"the {view.kind.kind} is accepted but each pod it creates is rejected"


def _container_findings(view: WorkloadView, container: Container) -> Iterator[Finding]:
    res = container.resources() or {}
    requests = res.get("requests") if isinstance(res.get("requests"), dict) else {}
    limits = res.get("limits") if isinstance(res.get("limits"), dict) else {}
    for resource in container.gpus:
        req, lim = quantity.parse(requests.get(resource)), quantity.parse(limits.get(resource))
        amount = lim if lim is not None else req
        if amount is not None and amount != amount.to_integral_value():
            yield Finding(container.path, f"{resource} is {amount}: GPUs are whole devices and a fraction can never "
                          "be scheduled", "ask for a whole number, or a MIG/shared resource for a slice "
                          "(e.g. nvidia.com/mig-1g.10gb)", container.name)
        elif lim is None:
            yield Finding(container.path, f"{resource} is requested without a limit: {_when(view)} (limit must be "
                          "set for non-overcommitable resources)", f"set limits.{resource} equal to the request",
                          container.name)
        elif req is not None and req != lim:
            yield Finding(container.path, f"requests.{resource} ({req}) differs from limits ({lim}): "
                          f"{_when(view)} (extended resources can't be overcommitted)",
                          f"set requests.{resource} equal to limits.{resource}, or drop the request",
                          container.name)


def _sum(template: PodTemplate, name: str) -> Decimal:
    total = Decimal(0)
    for container in template.containers:
        if container.is_init:
            continue
        value = container.resource_value("requests", name)
        if value is None:
            value = container.resource_value("limits", name)
        total += quantity.parse(value) or 0
    return total


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    for template in view.gpu_templates:
        for container in template.gpu_containers:
            yield from _container_findings(view, container)
        per_pod = template.gpus_per_pod
        if per_pod > settings.max_gpus_per_node:
            yield Finding(template.spec_path, f"a pod asks for {per_pod} GPUs but the largest node has "
                          f"{settings.max_gpus_per_node}: it would pend forever",
                          f"use at most {settings.max_gpus_per_node} GPUs per pod and add workers instead")
        for name, limit_text in (("cpu", settings.max_cpu_per_node), ("memory", settings.max_memory_per_node)):
            limit = quantity.parse(limit_text)
            asked = _sum(template, name)
            if limit is not None and asked > limit:
                yield Finding(template.spec_path, f"a pod requests {name} {asked} but the largest GPU node has "
                              f"{limit_text}: it would pend forever", f"request at most {limit_text} {name} per pod")
    total = view.total_gpus
    if settings.max_gpus_per_workload is not None and total > settings.max_gpus_per_workload:
        yield Finding(("spec",), f"the workload asks for {total} GPUs in all, over the limit of "
                      f"{settings.max_gpus_per_workload} per workload: its pods would pend on quota",
                      "lower replicas or GPUs per pod, or ask the platform team for a larger limit")


POLICY = ValidatingPolicy(
    id="gpu-request-shape",
    title="GPU requests a scheduler can satisfy",
    settings_model=Settings,
    run=validate,
    description="Whole GPUs, requests equal to limits, at most the largest node's GPUs per pod and a "
    "configured total per workload (and optionally node CPU/memory).",
    rationale="A request no node can satisfy pends forever; a bad template in a PyTorchJob fails pod by pod "
    "while the pods that did start hold GPUs idle.",
    example="""\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/example/train:1
        resources:
          limits: {nvidia.com/gpu: 8}
""",
)
