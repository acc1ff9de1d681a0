"""JobSet (``jobset.x-k8s.io``): replicated Jobs, each a Job template run ``replicas`` times."""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, Gang, JobFields, KindSpec, Operator, TemplateRef, VolumeClaims
from gpuguard.workloads.kinds.templates import count, job_replicas
from gpuguard.workloads.paths import Path, get_path

# JobSet (jobset-system, upstream manifests and chart): the Jobs of each replicated job.
JOBSET_CONTROLLER = Operator("jobset", ("system:serviceaccount:jobset-system:jobset-controller-manager",))


def _jobset(obj: dict) -> Iterator[TemplateRef]:
    jobs = get_path(obj, ("spec", "replicatedJobs"))
    if not isinstance(jobs, list):
        return
    for i, rjob in enumerate(jobs):
        if not isinstance(rjob, dict):
            continue
        base: Path = ("spec", "replicatedJobs", i, "template", "spec")
        per_job = job_replicas(get_path(rjob, ("template", "spec")))
        yield TemplateRef(str(rjob.get("name", i)), base + ("template", "spec"), base + ("template", "metadata"),
                          count(rjob.get("replicas")) * per_job)


# JobSet's own webhook refuses changes to replicatedJobs.
JOBSET = KindSpec("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",), "training", _jobset,
                  JobFields(ttl=("spec", "ttlSecondsAfterFinished")), gang=Gang(pod_grouped=True),
                  volume_claims=VolumeClaims(("spec", "volumeClaimPolicies"), "claim-policies"),
                  immutable=(("spec", "replicatedJobs"),),
                  pod_spec_paths=(("spec", "replicatedJobs", "[]", "template", "spec", "template", "spec"),),
                  controllers=(Creates(JOBSET_CONTROLLER, ("batch/Job",)),))
