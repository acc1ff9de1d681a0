"""The workload kinds gpuguard understands: everything about a kind, in one ``KindSpec`` each.

One table drives everything that needs to know about kinds: the workload view (where the
pod templates are and how many pods each makes), the policies (where TTL, deadline and
retry fields live, how the kind gangs, where it keeps a priority class or claims outside
its pods, whether it is a bare Pod), the webhook configuration generator (which
group/resource to intercept) and the audit ``--cluster`` lister (what to list).  Policies
never compare kind names: they ask the ``KindSpec`` through the workload view.  Adding a
kind means adding one ``KindSpec`` here and its fixtures (``docs/contributing.md``).

Dispatch is on API group + kind, never on the version: operators move their CRDs between
versions (Kubeflow v1 -> v2, MPIJob v1 -> v2beta1, JobSet v1alpha2) while the fields
gpuguard reads stay where they were, so one entry serves every version listed in
``versions`` (which only the webhook rules and the cluster lister use).  Two kinds may share a
name in different groups (``batch`` Job and Volcano's ``batch.volcano.sh`` Job), which is why
nothing may dispatch on the name alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from workloads.paths import Path, get_path


@dataclass(frozen=True)
class TemplateRef:
    """One pod template inside a workload.

    ``spec_path`` points at the PodSpec (``containers``, ``volumes`` ...), ``meta_path`` at
    the template's ObjectMeta, or ``None`` where the kind inlines a PodSpec without one
    (KServe predictors).  ``replicas`` is how many pods this template makes, so that GPU
    totals per workload are replicas x GPUs per pod.
    """

    role: str
    spec_path: Path
    meta_path: Path | None
    replicas: int


@dataclass(frozen=True)
class JobFields:
    """Where a kind keeps its finish/retry fields (paths from the object root)."""

    ttl: Path | None = None
    deadline: Path | None = None
    backoff: Path | None = None
    # RayJob: ttlSecondsAfterFinished only works with shutdownAfterJobFinishes: true.
    ttl_requires_true: Path | None = None
    # The apiserver defaults Job.spec.backoffLimit to 6 before admission webhooks run, so a
    # webhook can't tell "unset" from "6": that value counts as unset.
    backoff_api_default: int | None = None


@dataclass(frozen=True)
class Gang:
    """A kind whose pods run as one distributed job, so they must be scheduled all-or-nothing.

    ``operator_policy``: where a Kubeflow-style operator reads its scheduling policy; when the
    object sets it, the operator creates a PodGroup for a gang scheduler.  ``own_scheduler``:
    kinds whose controller gangs by itself (Volcano's Job) unless this field names a
    scheduler that does not.
    """

    operator_policy: Path | None = None
    own_scheduler: Path | None = None


@dataclass(frozen=True)
class ClaimSource:
    """Volumes a kind's controller creates for its pods outside the pod spec.

    ``style`` says how to read the list at ``path``:
    ``claim-templates``: StatefulSet ``volumeClaimTemplates`` (claims kept when the set is deleted);
    ``claim-policies``: JobSet ``volumeClaimPolicies`` (``retentionPolicy.whenDeleted``, default Delete);
    ``volcano-volumes``: Volcano ``spec.volumes`` (mounted in every container; ``volumeClaimName``
    is an existing claim, ``volumeClaim`` one the job creates and deletes).
    """

    path: Path
    style: Literal["claim-templates", "claim-policies", "volcano-volumes"]


@dataclass(frozen=True)
class KindSpec:
    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    default_class: str  # training | inference | notebook, unless the config's workloadClasses says otherwise
    locate: Any = field(repr=False)  # Callable[[dict], Iterator[TemplateRef]]
    job: JobFields | None = None
    gang: Gang | None = None  # None: not a distributed job (never gang-checked)
    priority_class_paths: tuple[Path, ...] = ()  # priority classes set outside the pod templates
    claims: ClaimSource | None = None

    @property
    def is_pod(self) -> bool:
        """The object is itself a Pod: its spec is the PodSpec, and the apiserver's Priority
        admission has already filled ``spec.priority`` before webhooks run."""
        return self.group == "" and self.kind == "Pod"

    @property
    def validated_by_apiserver(self) -> bool:
        """Built-in kinds: the apiserver validates their pod templates on create, so a bad template
        is refused at once; a custom resource is accepted and its pods fail one by one later."""
        return self.group in ("", "batch", "apps")

    @property
    def api_group_kind(self) -> tuple[str, str]:
        return (self.group, self.kind)


def _int(value: Any, default: int = 1) -> int:
    """Replica counts from user input: ints only (bools and strings are not counts)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default


def _pod(obj: dict) -> Iterator[TemplateRef]:
    yield TemplateRef("pod", ("spec",), ("metadata",), 1)


def _template(prefix: Path, replicas_path: Path | None = None, role: str = "template"):
    def locate(obj: dict) -> Iterator[TemplateRef]:
        replicas = _int(get_path(obj, replicas_path)) if replicas_path else 1
        yield TemplateRef(role, prefix + ("template", "spec"), prefix + ("template", "metadata"), replicas)

    return locate


def _job_replicas(job_spec: Any) -> int:
    """Pods a Job runs at once: parallelism (default 1), capped by completions when set."""
    parallelism = _int(get_path(job_spec, ("parallelism",)))
    completions = get_path(job_spec, ("completions",))
    if isinstance(completions, int) and not isinstance(completions, bool) and completions > 0:
        return min(parallelism, completions)
    return parallelism


def _job(obj: dict) -> Iterator[TemplateRef]:
    yield TemplateRef("job", ("spec", "template", "spec"), ("spec", "template", "metadata"),
                      _job_replicas(get_path(obj, ("spec",))))


def _cronjob(obj: dict) -> Iterator[TemplateRef]:
    base: Path = ("spec", "jobTemplate", "spec")
    yield TemplateRef("job", base + ("template", "spec"), base + ("template", "metadata"),
                      _job_replicas(get_path(obj, base)))


def _replica_map(field_name: str):
    """Kubeflow v1 / MPI: ``spec.<x>ReplicaSpecs.<Role>.template`` (role keys are case-insensitive)."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        specs = get_path(obj, ("spec", field_name))
        if not isinstance(specs, dict):
            return
        for role, rspec in specs.items():
            if not isinstance(rspec, dict):
                continue
            base: Path = ("spec", field_name, role, "template")
            yield TemplateRef(str(role), base + ("spec",), base + ("metadata",), _int(rspec.get("replicas")))

    return locate


def _jobset(obj: dict) -> Iterator[TemplateRef]:
    jobs = get_path(obj, ("spec", "replicatedJobs"))
    if not isinstance(jobs, list):
        return
    for i, rjob in enumerate(jobs):
        if not isinstance(rjob, dict):
            continue
        base: Path = ("spec", "replicatedJobs", i, "template", "spec")
        per_job = _job_replicas(get_path(rjob, ("template", "spec")))
        yield TemplateRef(str(rjob.get("name", i)), base + ("template", "spec"), base + ("template", "metadata"),
                          _int(rjob.get("replicas")) * per_job)


def _volcano(obj: dict) -> Iterator[TemplateRef]:
    tasks = get_path(obj, ("spec", "tasks"))
    if not isinstance(tasks, list):
        return
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        base: Path = ("spec", "tasks", i, "template")
        yield TemplateRef(str(task.get("name", i)), base + ("spec",), base + ("metadata",), _int(task.get("replicas")))


def _ray_groups(prefix: Path):
    def locate(obj: dict) -> Iterator[TemplateRef]:
        head = prefix + ("headGroupSpec", "template")
        if isinstance(get_path(obj, head), dict):
            yield TemplateRef("head", head + ("spec",), head + ("metadata",), 1)
        groups = get_path(obj, prefix + ("workerGroupSpecs",))
        if isinstance(groups, list):
            for i, group in enumerate(groups):
                if not isinstance(group, dict):
                    continue
                base = prefix + ("workerGroupSpecs", i, "template")
                replicas = max(_int(group.get("replicas")), _int(group.get("minReplicas"), 0))
                yield TemplateRef(str(group.get("groupName", f"worker-{i}")), base + ("spec",), base + ("metadata",),
                                  replicas * _int(group.get("numOfHosts")))

    return locate


def _rayjob(obj: dict) -> Iterator[TemplateRef]:
    yield from _ray_groups(("spec", "rayClusterSpec"))(obj)
    sub = ("spec", "submitterPodTemplate")
    if isinstance(get_path(obj, sub), dict):
        yield TemplateRef("submitter", sub + ("spec",), sub + ("metadata",), 1)


def _lws(obj: dict) -> Iterator[TemplateRef]:
    groups = _int(get_path(obj, ("spec", "replicas")))
    size = _int(get_path(obj, ("spec", "leaderWorkerTemplate", "size")))
    base: Path = ("spec", "leaderWorkerTemplate")
    if isinstance(get_path(obj, base + ("leaderTemplate",)), dict):
        yield TemplateRef("leader", base + ("leaderTemplate", "spec"), base + ("leaderTemplate", "metadata"), groups)
        workers = groups * max(size - 1, 0)
    else:
        workers = groups * size
    yield TemplateRef("worker", base + ("workerTemplate", "spec"), base + ("workerTemplate", "metadata"), workers)


def _kserve(obj: dict) -> Iterator[TemplateRef]:
    for component in ("predictor", "transformer", "explainer"):
        comp = get_path(obj, ("spec", component))
        if not isinstance(comp, dict):
            continue
        replicas = max(_int(comp.get("minReplicas")), 1)
        yield TemplateRef(component, ("spec", component), None, replicas)
        if isinstance(comp.get("workerSpec"), dict):
            yield TemplateRef(f"{component}-worker", ("spec", component, "workerSpec"), None, replicas)


_RUN_POLICY = JobFields(ttl=("spec", "runPolicy", "ttlSecondsAfterFinished"),
                        deadline=("spec", "runPolicy", "activeDeadlineSeconds"),
                        backoff=("spec", "runPolicy", "backoffLimit"))
_KUBEFLOW_VERSIONS = ("v1",)
_GANG = Gang()


def _kubeflow(kind: str, plural: str, replica_specs: str, versions: tuple[str, ...] = _KUBEFLOW_VERSIONS) -> KindSpec:
    """A Kubeflow training-operator job: roles under ``<x>ReplicaSpecs``, limits, gang scheduling and
    priority under ``runPolicy`` (``schedulingPolicy`` makes the operator create a PodGroup)."""
    return KindSpec("kubeflow.org", kind, plural, versions, "training", _replica_map(replica_specs), _RUN_POLICY,
                    gang=Gang(operator_policy=("spec", "runPolicy", "schedulingPolicy")),
                    priority_class_paths=(("spec", "runPolicy", "schedulingPolicy", "priorityClass"),))


KINDS: tuple[KindSpec, ...] = (
    KindSpec("", "Pod", "pods", ("v1",), "training", _pod,
             JobFields(deadline=("spec", "activeDeadlineSeconds"))),
    KindSpec("batch", "Job", "jobs", ("v1",), "training", _job,
             JobFields(ttl=("spec", "ttlSecondsAfterFinished"), deadline=("spec", "activeDeadlineSeconds"),
                       backoff=("spec", "backoffLimit"), backoff_api_default=6), gang=_GANG),
    KindSpec("batch", "CronJob", "cronjobs", ("v1",), "training", _cronjob,
             JobFields(ttl=("spec", "jobTemplate", "spec", "ttlSecondsAfterFinished"),
                       deadline=("spec", "jobTemplate", "spec", "activeDeadlineSeconds"),
                       backoff=("spec", "jobTemplate", "spec", "backoffLimit"), backoff_api_default=6),
             gang=_GANG),
    KindSpec("apps", "Deployment", "deployments", ("v1",), "inference", _template(("spec",), ("spec", "replicas"))),
    KindSpec("apps", "StatefulSet", "statefulsets", ("v1",), "inference",
             _template(("spec",), ("spec", "replicas")),
             claims=ClaimSource(("spec", "volumeClaimTemplates"), "claim-templates")),
    KindSpec("apps", "ReplicaSet", "replicasets", ("v1",), "inference", _template(("spec",), ("spec", "replicas"))),
    KindSpec("apps", "DaemonSet", "daemonsets", ("v1",), "inference", _template(("spec",))),
    _kubeflow("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs"),
    _kubeflow("TFJob", "tfjobs", "tfReplicaSpecs"),
    _kubeflow("MPIJob", "mpijobs", "mpiReplicaSpecs", ("v2beta1", "v1")),
    _kubeflow("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs"),
    _kubeflow("PaddleJob", "paddlejobs", "paddleReplicaSpecs"),
    _kubeflow("JAXJob", "jaxjobs", "jaxReplicaSpecs"),
    KindSpec("kubeflow.org", "Notebook", "notebooks", ("v1", "v1beta1"), "notebook", _template(("spec",))),
    KindSpec("jobset.x-k8s.io", "JobSet", "jobsets", ("v1alpha2",), "training", _jobset,
             JobFields(ttl=("spec", "ttlSecondsAfterFinished")), gang=_GANG,
             claims=ClaimSource(("spec", "volumeClaimPolicies"), "claim-policies")),
    KindSpec("batch.volcano.sh", "Job", "jobs", ("v1alpha1",), "training", _volcano,
             JobFields(ttl=("spec", "ttlSecondsAfterFinished"), backoff=("spec", "maxRetry")),
             gang=Gang(own_scheduler=("spec", "schedulerName")), priority_class_paths=(("spec", "priorityClassName"),),
             claims=ClaimSource(("spec", "volumes"), "volcano-volumes")),
    KindSpec("ray.io", "RayJob", "rayjobs", ("v1",), "training", _rayjob,
             JobFields(ttl=("spec", "ttlSecondsAfterFinished"), deadline=("spec", "activeDeadlineSeconds"),
                       ttl_requires_true=("spec", "shutdownAfterJobFinishes"))),
    KindSpec("ray.io", "RayCluster", "rayclusters", ("v1",), "inference", _ray_groups(("spec",))),
    KindSpec("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",), "inference", _lws),
    KindSpec("serving.kserve.io", "InferenceService", "inferenceservices", ("v1beta1",), "inference", _kserve),
)

_BY_GROUP_KIND: dict[tuple[str, str], KindSpec] = {k.api_group_kind: k for k in KINDS}
# Controllers whose pods (via ownerReferences) gpuguard treats as already checked.
CONTROLLER_KINDS = frozenset({"Job", "ReplicaSet", "StatefulSet", "DaemonSet"})


def group_of(api_version: Any) -> str:
    """``batch/v1`` -> ``batch``; ``v1`` -> ``""`` (the core group)."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def lookup(api_version: Any, kind: Any) -> KindSpec | None:
    """The KindSpec for an object's apiVersion/kind, or ``None`` for kinds gpuguard leaves alone."""
    if not isinstance(kind, str):
        return None
    return _BY_GROUP_KIND.get((group_of(api_version), kind))
