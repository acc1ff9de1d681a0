"""idle-after-finish: a job that keeps its GPU cluster after it ends gets a warning with the bill.

A RayJob runs on a RayCluster of its own; KubeRay deletes that cluster when the job ends only
with ``shutdownAfterJobFinishes: true``.  ``job-ttl`` sets it where the user left it out; where
the user set it to ``false`` (to inspect the cluster, to reuse it), that stays their choice, and
this policy says what it holds: every GPU of the cluster, around the clock, until someone
deletes the RayJob.  The kind table says where a kind keeps such a switch
(``JobFields.ttl_requires_true``); no kind is named here.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.policies.base import Action, Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.paths import dotted
from gpuguard.workloads.view import WorkloadView


class Settings(PolicySettings):
    action: Action = "warn"


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    fields = view.kind.job
    if fields is None or fields.ttl_requires_true is None or not view.is_gpu:
        return
    if view.job_value("ttl_requires_true") is not False:
        return
    gpus = view.total_gpus
    yield Finding(fields.ttl_requires_true,
                  f"{dotted(fields.ttl_requires_true)} is false: the job's cluster and its {gpus} GPU(s) stay up after "
                  f"the job ends, {gpus * 24} GPU-hours a day until the {view.kind.kind} is deleted",
                  f"remove {fields.ttl_requires_true[-1]}: false (gpuguard then sets it true with a TTL), or delete "
                  f"the {view.kind.kind} as soon as you are done with its cluster")


POLICY = ValidatingPolicy(
    id="idle-after-finish",
    title="No GPU clusters left idle after their job",
    settings_model=Settings,
    run=validate,
    description="Warns when a GPU RayJob (or RayCronJob) keeps its RayCluster after the job ends "
    "(`shutdownAfterJobFinishes: false`), with the GPU-hours a day the idle cluster holds.",
    rationale="KubeRay keeps a finished RayJob's cluster unless told to shut it down: every GPU of it stays "
    "allocated, idle, until someone notices.",
    cpu_scope=accelerator_objects_only,
)
