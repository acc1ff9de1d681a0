"""gang-scheduling: multi-pod GPU jobs must be scheduled all-or-nothing.

The default scheduler places pods one by one: half the workers of a distributed job start,
hold their GPUs and wait at the first collective for peers that pend on a full cluster.
Two such jobs can deadlock each other.  A gang scheduler (Volcano, Kueue, scheduler-plugins
coscheduling) admits the whole job or none of it.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from policies.base import Finding, PolicySettings, ValidatingPolicy
from workloads.kinds import Gang, KindSpec
from workloads.paths import get_path
from workloads.view import WorkloadView


class Settings(PolicySettings):
    schedulers: list[str] = Field(default_factory=lambda: ["volcano", "scheduler-plugins-scheduler"],
                                  description="schedulerName values that gang-schedule.")
    queue_labels: list[str] = Field(default_factory=lambda: ["kueue.x-k8s.io/queue-name"],
                                    description="Labels on the workload that put it in a gang-admitting queue.")
    pod_group_labels: list[str] = Field(
        default_factory=lambda: ["scheduling.x-k8s.io/pod-group", "scheduling.k8s.io/group-name"],
        description="Pod template labels or annotations naming a pod group.")
    accept_kubeflow_scheduling_policy: bool = Field(
        True, description="Accept Kubeflow runPolicy.schedulingPolicy (the operator runs with a gang scheduler).")
    kinds: list[str] | None = Field(
        None, description="Kinds checked, by name (Job) or name.group (Job.batch.volcano.sh, when a name is "
        "shared); unset: every distributed-job kind (Job, CronJob, Kubeflow jobs, JobSet, Volcano Job).")


def _template_is_ganged(template, settings: Settings) -> bool:
    if template.spec.get("schedulerName") in settings.schedulers:
        return True
    meta = template.metadata() or {}
    for section in ("labels", "annotations"):
        values = meta.get(section)
        if isinstance(values, dict) and any(key in values for key in settings.pod_group_labels):
            return True
    return False


def _ganged(view: WorkloadView, gang: Gang, settings: Settings) -> bool:
    if any(label in view.labels for label in settings.queue_labels):
        return True
    if gang.own_scheduler is not None:  # the kind's controller gangs unless told to use another scheduler
        return get_path(view.obj, gang.own_scheduler) in (None, *settings.schedulers)
    if settings.accept_kubeflow_scheduling_policy and gang.operator_policy is not None and isinstance(
            get_path(view.obj, gang.operator_policy), dict):
        return True
    return all(_template_is_ganged(t, settings) for t in view.gpu_templates)


def _checked(kind: KindSpec, settings: Settings) -> bool:
    return settings.kinds is None or kind.kind in settings.kinds or f"{kind.kind}.{kind.group}" in settings.kinds


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    gang = view.kind.gang
    if gang is None or not _checked(view.kind, settings):
        return
    if not view.is_gpu:
        return
    pods = view.pod_count()
    if pods <= 1 or _ganged(view, gang, settings):
        return
    yield Finding(("spec",), f"distributed GPU job with {pods} pods and no gang scheduler: some pods start and "
                  "hold GPUs while the rest pend, and the job never makes progress",
                  f"set schedulerName: {settings.schedulers[0]} on its pod templates, a Kueue queue label "
                  f"({settings.queue_labels[0] if settings.queue_labels else 'kueue.x-k8s.io/queue-name'}) or a "
                  "coscheduling pod-group label")


POLICY = ValidatingPolicy(
    id="gang-scheduling",
    title="Gang scheduling for distributed GPU jobs",
    settings_model=Settings,
    run=validate,
    description="Multi-pod GPU jobs (Kubeflow jobs with workers, JobSet, Job with parallelism > 1) must use a "
    "gang scheduler: schedulerName such as volcano, a Kueue queue label, or a pod-group label.",
    rationale="Without all-or-nothing scheduling, partial jobs hold GPUs waiting for peers that never start; "
    "two such jobs can deadlock a cluster.",
    example="""\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: train, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: ghcr.io/example/train:1
            resources:
              limits: {nvidia.com/gpu: 8}
    Worker:
      replicas: 3
      template:
        spec:
          schedulerName: volcano
          containers:
          - name: pytorch
            image: ghcr.io/example/train:1
            resources:
              limits: {nvidia.com/gpu: 8}
""",
)
