"""default-resources: CPU, memory and ephemeral-storage requests and limits where missing.

GPU containers are sized per GPU (match the node shape: a node with 8 GPUs, 96 CPUs and
1 TiB gives ~12 CPUs and ~128Gi per GPU), other containers get flat values.  A memory
limit is added (equal to the request by default), because a GPU pod without one is
BestEffort or unbounded Burstable: first to be evicted, or free to OOM its neighbours.

Never lowers what the user set: a missing request next to a set limit stays missing (the
apiserver defaults it to the limit on the Pod), and a missing limit is never set below
the request.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field, field_validator

from policies.base import ConfigModel, MutatingPolicy, PolicySettings
from workloads import quantity
from workloads.paths import child_dict
from workloads.view import Container, WorkloadView


class Size(ConfigModel):
    cpu: str
    memory: str
    ephemeral_storage: str

    @field_validator("cpu", "memory", "ephemeral_storage")
    @classmethod
    def _is_quantity(cls, value: str) -> str:
        if quantity.parse(value) is None:
            raise ValueError(f"{value!r} is not a Kubernetes quantity")
        return value


class Settings(PolicySettings):
    per_gpu: Size = Field(default_factory=lambda: Size(cpu="8", memory="64Gi", ephemeral_storage="50Gi"),
                          description="Requests per GPU for GPU containers.")
    non_gpu: Size = Field(default_factory=lambda: Size(cpu="500m", memory="1Gi", ephemeral_storage="2Gi"),
                          description="Requests for containers without GPUs.")
    memory_limit_factor: dict[str, float] = Field(
        default_factory=lambda: {"training": 1.0, "inference": 1.0, "notebook": 1.0},
        description="Memory limit = request x factor, by workload class (1.0 = Guaranteed-friendly).")
    ephemeral_storage_limit_factor: float = Field(2.0, ge=1.0)
    set_cpu_limit: bool = Field(False, description="Also set a CPU limit equal to the request "
                                "(throttles data loaders; off by default).")
    apply_to_non_gpu_pods: bool = Field(False, description="Also size pods that request no GPU.")


def _scaled(text: str, factor: int | float | Decimal) -> Decimal:
    value = quantity.parse(text)
    return (value or Decimal(0)) * Decimal(str(factor))


def _fill(container: Container, name: str, request: Decimal, limit_factor: float | None, fmt) -> bool:
    """Set ``name``'s request and limit where missing, never below what the user set."""
    resources = container.resources(create=True)
    if resources is None:
        return False
    requests, limits = resources.get("requests"), resources.get("limits")
    if not isinstance(requests, dict | None) or not isinstance(limits, dict | None):
        return False  # malformed: leave it to the apiserver's validation
    user_request = quantity.parse((requests or {}).get(name))
    user_limit = quantity.parse((limits or {}).get(name))
    changed = False
    if user_request is None and user_limit is None:
        child_dict(resources, "requests")[name] = fmt(request)
        user_request, changed = request, True
    if limit_factor is not None and user_limit is None and user_request is not None:
        child_dict(resources, "limits")[name] = fmt(user_request * Decimal(str(limit_factor)))
        changed = True
    return changed


def mutate(view: WorkloadView, settings: Settings) -> bool:
    if not (view.is_gpu or settings.apply_to_non_gpu_pods):
        return False
    changed = False
    memory_factor = settings.memory_limit_factor.get(view.workload_class, 1.0)
    for template in view.templates:
        for container in template.containers:
            gpus = container.gpu_count
            size, scale = (settings.per_gpu, gpus) if gpus else (settings.non_gpu, 1)
            changed |= _fill(container, "cpu", _scaled(size.cpu, scale), 1.0 if settings.set_cpu_limit else None,
                  quantity.format_cpu)
            changed |= _fill(container, "memory", _scaled(size.memory, scale), memory_factor, quantity.format_bytes)
            changed |= _fill(container, "ephemeral-storage", _scaled(size.ephemeral_storage, scale),
                  settings.ephemeral_storage_limit_factor, quantity.format_bytes)
    return changed


POLICY = MutatingPolicy(
    id="default-resources",
    title="Size CPU, memory and ephemeral storage per GPU",
    settings_model=Settings,
    run=mutate,
    description="Adds missing CPU, memory and ephemeral-storage requests and limits: per GPU for GPU "
    "containers, flat for the others; never lowers a value the user set.",
    rationale="A GPU pod with only a GPU limit is BestEffort: evicted first under memory pressure and "
    "free to starve its data loaders; right-sized requests keep a node's GPUs usable.",
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
          requests: {cpu: "8", memory: 64Gi, ephemeral-storage: 50Gi}
          limits: {nvidia.com/gpu: 1, memory: 64Gi, ephemeral-storage: 100Gi}
""",
)
