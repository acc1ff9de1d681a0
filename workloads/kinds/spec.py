"""What a kind entry says: ``KindSpec`` and the records it is made of.

Every fact gpuguard needs about a workload kind is a field here, so that the family modules
(``core``, ``kubeflow``, ``ray`` ...) only fill them in and every reader (the workload view,
the policies, the webhook rules and matchConditions, the trusted controllers, the cluster
lister) asks the ``KindSpec`` instead of keeping a table of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from gpuguard.workloads.paths import Path, get_path

# Where a PodSpec keeps its containers (the default of ``TemplateRef.container_lists``).
POD_CONTAINER_LISTS: tuple[tuple[str, ...], ...] = (("containers",), ("initContainers",))

# A path with wildcards, for the webhook's CEL matchConditions: a field name, "[]" (each list
# item) or "{}" (each map value).  At most one wildcard per pattern.
PathPattern = tuple[str, ...]


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
    replicas: int  # the most pods it can make at once (autoscaling maximums included)
    # Keys of the PodSpec that hold one container each (KServe's ``predictor.model``, ``pytorch`` …).
    container_keys: tuple[str, ...] = ()
    # Served through Knative (True), not (False), or by the cluster's default mode (None): Knative
    # refuses pod fields whose feature flag is off (tolerations, affinity, priorityClassName …).
    knative: bool | None = False
    # Lists of containers in the PodSpec (paths relative to it).  Argo templates keep theirs under
    # ``sidecars`` and ``containerSet.containers``; Spark driver/executor specs under ``sidecars``.
    container_lists: tuple[tuple[str, ...], ...] = POD_CONTAINER_LISTS
    # Volume lists the pod gets (paths from the object root); new volumes go in the first.  Empty:
    # the PodSpec's own ``volumes``.  A Spark application shares ``spec.volumes`` between driver and
    # executors; an Argo template adds its own to the workflow's ``spec.volumes``.
    volume_paths: tuple[Path, ...] = ()
    # How the PodSpec holds the main container: ``pod`` (in its container lists), or ``spark`` (the
    # driver/executor spec *is* the main container: ``cores``, ``memory``, ``gpu``, ``env`` …, and the
    # operator writes the container's ``resources`` itself; see ``kinds.spark.operator``); the serving
    # operators' shapes (``gpuguard.workloads.serving``): ``dynamo`` (a Dynamo service's ``extraPodSpec`` with
    # its ``mainContainer``, resources in the service's shorthand), ``vllm`` (a production-stack
    # ``deploymentConfig``, resources in its shorthand), ``inline`` (the spec is the pod and its one
    # container: a NIMService) and ``kubeai`` (a KubeAI Model: resources and pod fields from the config's
    # resource profile it names).
    shape: Literal["pod", "spark", "dynamo", "vllm", "inline", "kubeai"] = "pod"
    # Pod fields the template takes from the object when it does not set them itself, as (field, path
    # from the object root), first match wins: Argo templates inherit ``tolerations``, ``nodeSelector``,
    # ``affinity``, ``schedulerName`` and the priority class from ``templateDefaults`` and the workflow
    # spec, and a template-level value replaces the workflow's, it is not merged.  The view shows
    # policies the inherited value in the template (so one they extend keeps what the pod would get),
    # and puts back what no policy changed (``WorkloadView.settle``).
    inherits: tuple[tuple[str, Path], ...] = ()
    # Autoscaling without a maximum (Spark dynamic allocation with no maxExecutors): ``replicas``
    # counts what starts, the workload may grow past any budget, and this is the field that bounds it.
    unbounded: Path | None = None


# Finds an object's pod templates (never raises on malformed input: it yields what it can read).
Locate = Callable[[dict], Iterator[TemplateRef]]
# Pods of each template (by role) running together at the heaviest moment, given one pod's weight.
Peak = Callable[[dict, Callable[[str], int]], dict[str, int]]
# Builds the object that holds the pod templates from the object and the one it names.
Expand = Callable[[dict, dict], dict]


@dataclass(frozen=True)
class JobFields:
    """Where a kind keeps its finish/retry fields (paths from the object root)."""

    ttl: Path | None = None
    deadline: Path | None = None
    backoff: Path | None = None
    # RayJob: ttlSecondsAfterFinished only works with shutdownAfterJobFinishes: true, which is off by
    # default (the RayCluster outlives the job).  job-ttl sets it true unless the user set it false.
    ttl_requires_true: Path | None = None
    # Other TTLs of the kind, which take precedence for some outcomes (Argo's ttlStrategy
    # secondsAfterSuccess/secondsAfterFailure): capped like ``ttl``, never added.
    ttl_variants: tuple[Path, ...] = ()
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
    # Where the kind says how many pods must start together (Volcano Job ``spec.minAvailable``;
    # default, when unset or 0: all of them).  Kubeflow's is ``minAvailable`` in ``operator_policy``.
    min_available: Path | None = None
    # A scheduler with a pod grouper (NVIDIA KAI) gangs this kind's pods by itself, all replicas in one PodGroup
    # (Kubeflow jobs, JobSet); a kind without it (a plain Job) gets a PodGroup of one.
    pod_grouped: bool = False
    # The cluster's own controller of the kind gangs an object by itself where the cluster runs it so (Kubernetes
    # 1.36+: kube-controller-manager's Job controller with the WorkloadWithJob gate makes a Workload and a PodGroup
    # for an Indexed Job whose parallelism equals its completions).  ``controller_gap(object)`` says why that
    # controller would not gang this object (``None``: it would).  Counted only where the admin says the gate is on
    # (gang-scheduling's ``jobControllerGangs``): the object can't show it.
    controller_gap: Callable[[dict], str | None] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class VolumeClaims:
    """PersistentVolumeClaims a kind's controller creates for its pods, outside the pod spec.

    ``style`` says how to read the list at ``path``:
    ``claim-templates``: StatefulSet ``volumeClaimTemplates`` (claims kept when the set is deleted);
    ``claim-policies``: JobSet ``volumeClaimPolicies`` (``retentionPolicy.whenDeleted``, default Delete);
    ``volcano-volumes``: Volcano ``spec.volumes`` (mounted in every container; ``volumeClaimName``
    is an existing claim, ``volumeClaim`` one the job creates and deletes).  Every style outlives the
    pods and the workload's restarts, so ``checkpoint-volume`` counts them all as persistent storage.
    """

    path: Path
    style: Literal["claim-templates", "claim-policies", "volcano-volumes"]


@dataclass(frozen=True)
class ServeConfig:
    """Where a kind holds Ray Serve applications as YAML text (a RayService's ``serveConfigV2``) and the Ray
    cluster that runs them (``rayClusterConfig``): what its replicas use is read from the one and compared with
    the pods of the other (``kinds.ray.serve``)."""

    text: Path
    cluster: Path


@dataclass(frozen=True)
class Declared:
    """Accelerator devices a kind's own fields say a model server uses (``devices``), the fields and values
    that say so as users wrote them (``parallelism.tensor 4 x parallelism.dataLocal 2``), and where."""

    devices: int
    fields: str
    path: Path


@dataclass(frozen=True)
class ServingGroup:
    """Pods that run one model server together: a LeaderWorkerSet group, a multi-node LLMInferenceService
    workload's group (one per replica).  ``size`` pods, the first from the template of role ``leader``, the
    others from ``worker`` (the same role where one template makes them all); ``size_field`` is the field
    that sets the size, as users read it.  ``per_pod`` and ``total``: the devices each pod's server and the
    whole group's server use, where the kind's own fields say (its operator passes them to the server);
    ``None`` where only the command line can say.  A group of size 1 is a single-pod server the kind's
    fields size.  ``replicas``: how many such groups run at once."""

    leader: str
    worker: str
    size: int
    size_field: str
    replicas: int = 1
    per_pod: Declared | None = None
    total: Declared | None = None


# The serving groups of an object (never raises on malformed input).
Groups = Callable[[dict], Iterator[ServingGroup]]


@dataclass(frozen=True)
class TemplateSource:
    """A kind whose pod templates live in another object it names (a Kubeflow Trainer TrainJob and its
    TrainingRuntime / ClusterTrainingRuntime).  ``expand(object, named)`` builds the object that does
    hold them (the JobSet the operator will create), which gpuguard judges in the named object's stead.
    """

    ref: Path  # where the object names its source ({name, kind, apiGroup})
    group: str
    default_kind: str
    namespaced_kinds: tuple[str, ...]
    expand: Expand = field(repr=False)
    # (kind, version, plural) of each source kind, for reading it from the API.
    resources: tuple[tuple[str, str, str], ...] = ()


# Reads one object: (group, kind, namespace or None, name) -> the object, or None when unknown.
ReadObject = Callable[[str, str, str | None, str], dict | None]
# Lists the objects of a kind: (group, kind, namespace or None for cluster-scoped) -> the objects, or None
# when they can't be listed.
ListObjects = Callable[[str, str, str | None], list[dict] | None]


@dataclass(frozen=True)
class Resolved:
    """The runtime an object takes part of its pods from: ``runtime`` (its ``kind`` and ``name``), or
    ``None`` with ``problem`` saying why none could be chosen."""

    runtime: dict | None
    kind: str = ""
    name: str = ""
    problem: str = ""


@dataclass(frozen=True)
class MergedRuntime:
    """A kind that holds pod templates of its own but whose operator completes them from a runtime, named
    or selected by the operator (a KServe InferenceService in model form and the ServingRuntime or
    ClusterServingRuntime that KServe merges in: the runtime's container, with the object's own container
    fields over it).  Unlike ``TemplateSource`` the object is mutated as any other; validation judges
    ``merge(object, runtime)``, the pods the operator will really make.

    ``resolve(object, namespace, read, list)`` chooses the runtime as the operator does, or returns
    ``None`` when the object takes nothing from one (its own containers are the whole pod).  ``list``
    is ``None`` where nothing can be listed.
    """

    group: str
    resolve: Callable[[dict, str | None, ReadObject, ListObjects | None], Resolved | None] = field(repr=False)
    merge: Expand = field(repr=False)
    # (kind, version, plural) of each runtime kind, for reading and listing it from the API.
    resources: tuple[tuple[str, str, str], ...] = ()


def runtime_of(obj: dict, source: TemplateSource, namespace: str | None) -> tuple[str, str, str | None, str] | None:
    """(group, kind, namespace or None, name) of the object ``obj`` takes its templates from, or ``None``
    when it names none."""
    ref = get_path(obj, source.ref)
    if not isinstance(ref, dict):
        return None
    name, kind, group = ref.get("name"), ref.get("kind"), ref.get("apiGroup")
    if not isinstance(name, str) or not name:
        return None
    kind = kind if isinstance(kind, str) else source.default_kind
    group = group if isinstance(group, str) else source.group
    return group, kind, namespace if kind in source.namespaced_kinds else None, name


@dataclass(frozen=True)
class Operator:
    """A controller gpuguard trusts by identity: its ``trustedControllers`` entry name and the usernames
    its requests carry (the upstream manifests' and charts' service accounts in their default
    namespaces; an admin's entry of the same name replaces them, see ``docs/admin.md``)."""

    name: str
    users: tuple[str, ...]


@dataclass(frozen=True)
class Creates:
    """Objects ``operator`` creates from an object of this kind, its controlling owner: the ``kinds`` in the
    config's GroupKind notation (``Pod``, ``apps/ReplicaSet``).  gpuguard leaves them as the template it
    checked made them, unless ``mutate`` (see ``gpuguard.workloads.controllers``).  ``owner`` names the
    owner kind when it is not this kind (each LeaderWorkerSet group's leader Pod owns its workers)."""

    operator: Operator
    kinds: tuple[str, ...]
    mutate: bool = False
    owner: str | None = None


@dataclass(frozen=True)
class KindSpec:
    """Everything gpuguard knows about one workload kind (one API group + kind, every version)."""

    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    # The class's last hint, when nothing the workload runs says more (``gpuguard.workloads.classify``),
    # unless the config's workloadClasses.byKind says otherwise.
    default_class: str
    locate: Locate = field(repr=False)
    job: JobFields | None = None
    gang: Gang | None = None  # None: not a distributed job (never gang-checked)
    priority_class_paths: tuple[Path, ...] = ()  # priority classes set outside the pod templates
    volume_claims: VolumeClaims | None = None
    # Fields the apiserver (or the kind's own operator webhook) refuses to change on UPDATE.  On an
    # UPDATE gpuguard leaves each as the stored object has it (see ``gpuguard.webhook.engine.update``).
    immutable: tuple[Path, ...] = ()
    # Where the ``scale`` subresource's ``spec.replicas`` lands in the object, declared for kinds known to have
    # one: scaling is validated like an UPDATE of that field (GPU totals hold).  A custom resource without it may
    # still have one: its CRD says where (``scalable``; read from the cluster when a Scale arrives).
    scale_replicas: Path | None = None
    runtime: TemplateSource | None = None  # the object holding the pod templates, when not this one
    merged_runtime: MergedRuntime | None = None  # a runtime the operator merges into this kind's pods
    # Kinds whose templates do not all run at once (an Argo workflow's steps and DAG tasks):
    # ``peak(object, weight)`` is the number of pods of each template (by role) running together at
    # the heaviest moment, ``weight(role)`` being what one pod of it counts (its GPUs).  ``None``: all
    # templates run together, ``replicas`` pods each.
    peak: Peak | None = field(default=None, repr=False)
    # Every place ``locate`` can find a PodSpec, as patterns the webhook's CEL matchConditions follow
    # (``tests/unit/workloads/test_kinds.py`` checks them against ``locate``).  Empty: CEL can't see the
    # kind's accelerators from the object alone (containers under framework keys, pod-set paths held in
    # data, templates in another object, GPUs in Spark fields), so the webhook is called for every
    # object of the kind.
    pod_spec_paths: tuple[PathPattern, ...] = ()
    # The controllers that create objects from this kind (trusted by identity; see ``Creates``).
    controllers: tuple[Creates, ...] = ()
    # One pod on every node it can land on (a DaemonSet): with a node inventory its accelerators are
    # per pod x those nodes, not per pod x replicas.
    per_node: bool = False
    # Pods that run one model server together (``ServingGroup``): LeaderWorkerSet groups, multi-node
    # LLMInferenceServices.  ``None``: every pod runs its own servers.
    serving_groups: Groups | None = field(default=None, repr=False)
    # Ray Serve applications in the object, run by a Ray cluster it also holds (a RayService).
    serve_config: ServeConfig | None = None
    # Its operator only ever makes workloads of ``default_class`` (the serving operators make servers, Kubeflow's
    # notebook controller notebooks), whatever their containers run: the class is the kind's, not a look.
    class_fixed: bool = False
    # Command lines the operator runs outside the pod templates (a RayJob's ``entrypoint``): read with the
    # containers' own for what the work looks like.
    command_paths: tuple[Path, ...] = ()

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
    def scalable(self) -> bool:
        """Whether ``kubectl scale`` may reach it: a declared ``scale_replicas``, or a custom resource, whose CRD may
        declare a scale subresource gpuguard's table does not know (Kubeflow's TFJob, an operator's next release):
        the webhook's scale rule covers it, and the CRD the cluster serves says where the replicas land."""
        return self.scale_replicas is not None or not self.validated_by_apiserver

    @property
    def api_group_kind(self) -> tuple[str, str]:
        return (self.group, self.kind)
