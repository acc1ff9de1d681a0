"""job-ttl: finished jobs are deleted after a while, so they stop holding quota and claims.

The TTL field lives in a different place per kind (``kinds.JobFields.ttl``): Job, CronJob's
job template, Kubeflow ``runPolicy``, JobSet, Volcano Job, RayJob, RayCronJob, a
SparkApplication's ``timeToLiveSeconds``, Argo's ``ttlStrategy`` (its per-outcome TTLs are
capped too).  A RayJob's TTL
only works with ``shutdownAfterJobFinishes: true``, which KubeRay leaves off: the job's whole
GPU RayCluster then stays up after the job ends.  So where the user did not set it, it is set
to true along with the TTL; where the user set it to false, that choice stays (and
``idle-after-finish`` warns with what the idle cluster holds).
"""

from __future__ import annotations

from pydantic import Field

from gpuguard.policies.base import CpuScope, MutatingPolicy, PolicySettings, cpu_objects_if
from gpuguard.workloads.view import WorkloadView


class Settings(PolicySettings):
    ttl_seconds_after_finished: int = Field(86400, ge=0, description="TTL set where none is given.")
    max_ttl_seconds_after_finished: int | None = Field(604800, ge=0,
                                                       description="Larger TTLs are capped to this.")
    gpu_only: bool = Field(True, description="Only set it on workloads that request GPUs.")


def mutate(view: WorkloadView, settings: Settings) -> bool:
    fields = view.kind.job
    if fields is None or fields.ttl is None or (settings.gpu_only and not view.is_gpu):
        return False
    changed = False
    if fields.ttl_requires_true:
        shutdown = view.job_value("ttl_requires_true")
        if shutdown is None:
            if not view.set_job_value("ttl_requires_true", True):
                return False
            changed = True
        elif shutdown is not True:
            return False
    cap = settings.max_ttl_seconds_after_finished
    if cap is not None:
        changed |= view.cap_job_variants(cap)  # e.g. Argo's secondsAfterFailure: capped, never added
    return view.set_job_int("ttl", settings.ttl_seconds_after_finished, cap) or changed


def cpu_scope(settings: Settings) -> CpuScope:
    """CPU jobs too when ``gpuOnly`` is off."""
    return cpu_objects_if(not settings.gpu_only)


POLICY = MutatingPolicy(
    id="job-ttl",
    title="Delete finished jobs after a TTL",
    settings_model=Settings,
    run=mutate,
    description="Sets `ttlSecondsAfterFinished` (default 86400) on Job, CronJob, Kubeflow `runPolicy`, JobSet, "
    "Volcano Job, RayJob and RayCronJob, a SparkApplication's `timeToLiveSeconds` and an Argo workflow's "
    "`ttlStrategy.secondsAfterCompletion` where absent; caps values above 7 days (Argo's per-outcome TTLs too); on a "
    "RayJob also sets `shutdownAfterJobFinishes: true` unless the user set it false.",
    rationale="Finished jobs that are never deleted keep their pods, claims and (for RayJob) whole clusters "
    "around, holding quota and sometimes GPUs.",
    cpu_scope=cpu_scope,
    writes=("job.ttl", "job.ttl_variants", "job.ttl_requires_true"),
)
