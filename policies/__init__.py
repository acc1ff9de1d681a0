"""The policy registry: every policy gpuguard ships, in the order the engine runs them.

Mutating policies run first, in this order (resources before /dev/shm, whose size limit
is capped at the memory limit), then validating policies over the mutated object, as the
apiserver runs validating webhooks after mutating ones.
"""

from __future__ import annotations

from gpuguard.policies import (
    checkpoint_volume,
    default_resources,
    ephemeral_storage,
    gang_scheduling,
    gpu_memory_guard,
    gpu_node_affinity,
    gpu_request_shape,
    gpu_tolerations,
    idle_after_finish,
    inference_on_spot,
    job_limits,
    job_ttl,
    mixed_vendors,
    namespace_quota,
    priority_abuse,
    priority_class,
    schedulable,
    server_parallelism,
    shared_rwo_claim,
    shm_volume,
    workload_class,
)
from gpuguard.policies.base import Finding, MutatingPolicy, Policy, PolicySettings, ValidatingPolicy

REGISTRY: dict[str, Policy] = {
    module.POLICY.id: module.POLICY
    for module in (
        gpu_tolerations, gpu_node_affinity, default_resources, priority_class, job_ttl, job_limits, shm_volume,
        checkpoint_volume, gpu_memory_guard, gpu_request_shape, schedulable, mixed_vendors, server_parallelism,
        shared_rwo_claim, namespace_quota, gang_scheduling, inference_on_spot, ephemeral_storage, priority_abuse,
        workload_class, idle_after_finish,
    )
}

__all__ = ["REGISTRY", "Finding", "MutatingPolicy", "Policy", "PolicySettings", "ValidatingPolicy"]
