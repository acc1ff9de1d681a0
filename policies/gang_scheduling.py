"""gang-scheduling: multi-pod GPU jobs must be scheduled all-or-nothing, by something that really gangs.

The default scheduler places pods one by one: half the workers of a distributed job start,
hold their GPUs and wait at the first collective for peers that pend on a full cluster.
Two such jobs can deadlock each other.  What really gangs, judged by semantics, not by name:

* a Kueue queue label on the workload (Kueue admits the whole workload's quota at once);
* a kind whose controller gangs by itself (Volcano's Job), with ``minAvailable`` covering the
  pods that hold GPUs (unset means all pods);
* a Kubeflow ``runPolicy.schedulingPolicy`` (the operator creates a PodGroup), whose
  ``minAvailable``, when set, covers the GPU pods;
* a pod-group label on every GPU pod template (scheduler-plugins coscheduling
  ``scheduling.x-k8s.io/pod-group``, Volcano ``scheduling.k8s.io/group-name``), naming a PodGroup
  with its own ``minMember``;
* ``schedulerName: volcano`` together with the workload annotation
  ``scheduling.volcano.sh/group-min-member`` covering the GPU pods.

* ``schedulerName: kai-scheduler`` (NVIDIA KAI Scheduler) on every GPU pod template of a kind whose
  pods KAI's pod grouper gangs by itself (the family says so: ``Gang.pod_grouped`` — PyTorchJob, MPIJob, TFJob,
  XGBoostJob, JAXJob, JobSet: a PodGroup with ``minMember`` = all replicas), or of any kind with the workload annotation
  ``kai.scheduler/batch-min-member`` covering the GPU pods (KAI gives a plain Job ``minMember: 1``).

* the cluster's own gang (Kubernetes 1.35+, KEP-4671): every GPU pod template naming its group, ``spec.workloadRef``
  (1.35: a Workload's pod group) or ``spec.schedulingGroup`` (1.36: a PodGroup, which the Job controller also
  makes from a Workload's templates); kube-scheduler's GangScheduling plugin holds the pods until the group's
  ``minCount`` can be placed.  With ``jobControllerGangs`` (the admin says kube-controller-manager runs with the
  WorkloadWithJob gate, 1.36+), a Job the Job controller gangs itself (``Gang.controller_gap``: Indexed,
  parallelism equal to completions) counts too; the object can't show the gate, so it is never assumed.

``schedulerName: volcano`` alone does not gang: Volcano gives such pods an automatic PodGroup of
one (``minMember: 1``).  Only pods that hold GPUs at the same time count: the CPU initializer
pods of a Kubeflow Trainer JobSet, which run before the trainer, are not part of the gang.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads.kinds import Gang, KindSpec
from gpuguard.workloads.paths import dotted
from gpuguard.workloads.view import PodTemplate, WorkloadView

MIN_MEMBER_ANNOTATION = "scheduling.volcano.sh/group-min-member"
KAI_MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"


class Settings(PolicySettings):
    schedulers: list[str] = Field(default_factory=lambda: ["volcano"],
                                  description="schedulerName values that gang pods given a group-min-member "
                                  "annotation on the workload.")
    queue_labels: list[str] = Field(default_factory=lambda: ["kueue.x-k8s.io/queue-name"],
                                    description="Labels on the workload that put it in a gang-admitting queue.")
    pod_group_labels: list[str] = Field(
        default_factory=lambda: ["scheduling.x-k8s.io/pod-group", "scheduling.k8s.io/group-name",
                                 "scheduling.volcano.sh/group-name"],
        description="Pod template labels or annotations naming a pod group (with its own minMember).")
    pod_grouper_schedulers: list[str] = Field(
        default_factory=lambda: ["kai-scheduler"],
        description="schedulerName values whose own pod grouper gangs the pods of podGrouperKinds (KAI Scheduler), "
        "and of any kind given the annotation kai.scheduler/batch-min-member on the workload.")
    pod_grouper_kinds: list[str] | None = Field(
        None, description="Kinds (name or name.group) whose pods those schedulers gang by themselves (KAI: minMember "
        "= all replicas); unset: the kinds whose family says so (Kubeflow jobs but PaddleJob, JobSet); a plain Job "
        "gets minMember 1.")
    accept_kubeflow_scheduling_policy: bool = Field(
        True, description="Accept Kubeflow runPolicy.schedulingPolicy (the operator runs with a gang scheduler).")
    job_controller_gangs: bool = Field(
        False, description="kube-controller-manager runs with the WorkloadWithJob feature gate (Kubernetes 1.36+): "
        "its Job controller makes a Workload and a PodGroup (minCount = parallelism) for an Indexed Job, or a "
        "CronJob's, whose parallelism equals its completions, so such a Job counts as gang-scheduled. The object "
        "can't show the gate: off until the admin says so.")
    kinds: list[str] | None = Field(
        None, description="Kinds checked, by name (Job) or name.group (Job.batch.volcano.sh, when a name is "
        "shared); unset: every distributed-job kind (Job, CronJob, Kubeflow jobs, JobSet, Volcano Job).")


def _in_pod_group(template: PodTemplate, settings: Settings) -> bool:
    meta = template.metadata() or {}
    for section in ("labels", "annotations"):
        values = meta.get(section)
        if isinstance(values, dict) and any(key in values for key in settings.pod_group_labels):
            return True
    return False


# Pod spec fields that put a pod in a group kube-scheduler gangs (KEP-4671): 1.36's PodGroup, 1.35's Workload.
IN_TREE_GROUP_FIELDS = ("schedulingGroup", "workloadRef")


def _in_tree_group(template: PodTemplate) -> bool:
    """The template names its pod group for kube-scheduler's own gang (a non-empty reference)."""
    return any(isinstance(template.spec.get(key), (dict, str)) and template.spec.get(key)
               for key in IN_TREE_GROUP_FIELDS)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class ShortMinimum(str):
    """The gang is in place but its minimum is below the GPU pods (a Volcano Job's ``minAvailable``, a Kubeflow
    ``schedulingPolicy.minAvailable``): the fix is that number, not another gang."""

    path: str


def _short_minimum(gang: Gang, minimum: int, pods: int) -> ShortMinimum:
    path = dotted(gang.min_available)  # type: ignore[arg-type]
    short = ShortMinimum(f"{path} is {minimum}, fewer than its {pods} GPU pods")
    short.path = path
    return short


def _why_not_ganged(view: WorkloadView, gang: Gang, settings: Settings, pods: int) -> str | None:
    """``None`` when the GPU pods are ganged; else what is missing, for the message."""
    if any(label in view.labels for label in settings.queue_labels):
        return None
    minimum = _count(view.gang_value("min_available"))
    if gang.own_scheduler is not None:  # the kind's controller gangs unless told to use another scheduler
        scheduler = view.gang_value("own_scheduler")
        if scheduler not in (None, *settings.schedulers):
            return f"{dotted(gang.own_scheduler)} is {scheduler!r}, which does not gang"
        if minimum is not None and minimum < pods:
            return _short_minimum(gang, minimum, pods)
        return None
    if settings.accept_kubeflow_scheduling_policy and isinstance(view.gang_value("operator_policy"), dict):
        if minimum is not None and minimum < pods:
            return _short_minimum(gang, minimum, pods)
        return None
    templates = view.gpu_templates
    if all(_in_pod_group(t, settings) or _in_tree_group(t) for t in templates):
        return None
    if settings.job_controller_gangs:
        gap = view.controller_gang_gap()
        if gap is None:
            return None
        if view.kind.gang is not None and view.kind.gang.controller_gap is not None:
            return f"the Job controller gangs only an Indexed Job whose parallelism equals its completions: {gap}"
    if all(t.spec.get("schedulerName") in settings.pod_grouper_schedulers for t in templates):
        return _why_not_pod_grouped(view, settings, pods, templates[0].spec.get("schedulerName"))
    if all(t.spec.get("schedulerName") in settings.schedulers for t in templates):
        declared = view.annotations.get(MIN_MEMBER_ANNOTATION)
        if isinstance(declared, str) and declared.isdigit() and int(declared) >= pods:
            return None
        return (f"schedulerName {templates[0].spec.get('schedulerName')} alone gives its pods a PodGroup of one "
                "(minMember 1)")
    return "no gang scheduler"


def _why_not_pod_grouped(view: WorkloadView, settings: Settings, pods: int, scheduler: object) -> str | None:
    """A scheduler that groups pods itself (KAI): its kinds are ganged, others only with a min-member annotation."""
    grouped = view.kind.gang is not None and view.kind.gang.pod_grouped if settings.pod_grouper_kinds is None \
        else _named(view.kind, settings.pod_grouper_kinds)
    if grouped:
        return None
    declared = view.annotations.get(KAI_MIN_MEMBER_ANNOTATION)
    if isinstance(declared, str) and declared.isdigit() and int(declared) >= pods:
        return None
    return (f"schedulerName {scheduler} gives a {view.kind.kind} a PodGroup of minMember 1 unless the annotation "
            f"{KAI_MIN_MEMBER_ANNOTATION} covers its GPU pods")


def _named(kind: KindSpec, names: list[str]) -> bool:
    return kind.kind in names or f"{kind.kind}.{kind.group}" in names


def _checked(kind: KindSpec, settings: Settings) -> bool:
    return settings.kinds is None or _named(kind, settings.kinds)


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    gang = view.kind.gang
    if gang is None or not _checked(view.kind, settings) or not view.is_gpu:
        return
    # Pods that hold GPUs at the same time; CPU pods (initializers, launchers, parameter servers) do not.
    pods = sum(t.ref.replicas for t in view.gpu_templates)
    if pods <= 1:
        return
    missing = _why_not_ganged(view, gang, settings, pods)
    if missing is None:
        return
    problem = (f"distributed GPU job with {pods} GPU pods is not gang-scheduled ({missing}): some pods start and "
               "hold GPUs while the rest pend, and the job never makes progress")
    if isinstance(missing, ShortMinimum):
        yield Finding(("spec",), problem, f"set {missing.path} to {pods} (every GPU pod), or remove it: the gang then "
                      "waits for all its pods")
        return
    yield Finding(("spec",), problem,
                  "add a Kueue queue label (kueue.x-k8s.io/queue-name), a Kubeflow runPolicy.schedulingPolicy, a "
                  "coscheduling pod-group label (scheduling.x-k8s.io/pod-group) or, on Kubernetes 1.35+, a "
                  "spec.workloadRef / spec.schedulingGroup on its GPU pod templates, "
                  f"schedulerName: volcano with the annotation {MIN_MEMBER_ANNOTATION}: \"{pods}\", or "
                  f"schedulerName: kai-scheduler with the annotation {KAI_MIN_MEMBER_ANNOTATION}: \"{pods}\""
                  + _job_controller_hint(view, settings))


def _job_controller_hint(view: WorkloadView, settings: Settings) -> str:
    """Where the kind's own controller would gang this object once the admin says the cluster runs it so."""
    if settings.job_controller_gangs or view.controller_gang_gap() is not None:
        return ""
    return ("; or, where kube-controller-manager runs with the WorkloadWithJob feature gate (Kubernetes 1.36+), "
            "ask the admin to set gang-scheduling's jobControllerGangs: the Job controller gangs this Job itself")


POLICY = ValidatingPolicy(
    id="gang-scheduling",
    title="Gang scheduling for distributed GPU jobs",
    settings_model=Settings,
    run=validate,
    description="Multi-pod GPU jobs (Kubeflow jobs with workers, JobSet, Job with parallelism > 1, Volcano Job) must "
    "really gang: a Kueue queue label, a Kubeflow `schedulingPolicy` or Volcano Job whose `minAvailable` covers the "
    "GPU pods, a coscheduling/Volcano pod-group label, the cluster's own gang (`spec.workloadRef` or "
    "`spec.schedulingGroup` on every GPU pod template, Kubernetes 1.35+), `schedulerName: volcano` with a "
    "`group-min-member` "
    "annotation (`schedulerName` alone is a PodGroup of one), or `schedulerName: kai-scheduler` on the kinds KAI "
    "gangs itself (Kubeflow jobs, JobSet) or with a `batch-min-member` annotation. Only pods holding GPUs at once "
    "count.",
    rationale="Without all-or-nothing scheduling, partial jobs hold GPUs waiting for peers that never start; "
    "two such jobs can deadlock a cluster.",
    cpu_scope=accelerator_objects_only,
)
