"""Who may create objects from a template gpuguard already checked: controllers, by identity.

An object a controller makes from its parent's template (the ReplicaSet of a Deployment, the
Job of a CronJob or JobSet, the Pods of any of them) must come out of admission exactly as the
template says, or the controller's own comparisons fail: the Deployment controller took a
mutated ReplicaSet for a hash collision and made a new one, forever.  So gpuguard leaves such
objects alone: it neither mutates them nor, while ``trustControllerPods`` is on, validates them
again, and their workload class is their parent's.

"Made by a controller" is decided here and only here, from two facts, both required:

* the request's ``userInfo.username`` is that controller's identity — kube-controller-manager's
  per-controller service accounts (``--use-service-account-credentials``, the default of every
  kubeadm/managed cluster) or its own user ``system:kube-controller-manager``, and the operators'
  service accounts this table or the config names;
* the object's ``controller: true`` ownerReference points at a kind that controller creates this
  kind for (a ReplicaSet owned by a Deployment, from the deployment controller).

Object content alone (ownerReferences, labels, annotations) never grants anything: a user can
write any ownerReference, but cannot send a request as ``replicaset-controller``.

The operators' service account names below are those of their upstream install manifests and
Helm charts in their default namespaces; an admin whose operator runs elsewhere overrides the
entry by name in ``trustedControllers`` (see ``docs/admin.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The GroupKind notation used in the config: "Pod" (core group), "apps/ReplicaSet", "batch/Job".
GroupKind = tuple[str, str]

KCM_USER = "system:kube-controller-manager"


def kcm_sa(name: str) -> str:
    """kube-controller-manager's per-controller identity, e.g. ``replicaset-controller``."""
    return f"system:serviceaccount:kube-system:{name}"


# name -> (usernames, [(owner GroupKind, created GroupKind), ...]).  The defaults an admin's
# ``trustedControllers`` entries override by name.
DEFAULT_TRUSTED_CONTROLLERS: dict[str, dict[str, Any]] = {
    "replicaset-controller": {
        "users": [kcm_sa("replicaset-controller"), KCM_USER],
        "creates": [{"owner": "apps/ReplicaSet", "kind": "Pod"}],
    },
    "deployment-controller": {
        "users": [kcm_sa("deployment-controller"), KCM_USER],
        "creates": [{"owner": "apps/Deployment", "kind": "apps/ReplicaSet"}],
    },
    "statefulset-controller": {
        "users": [kcm_sa("statefulset-controller"), KCM_USER],
        "creates": [{"owner": "apps/StatefulSet", "kind": "Pod"}],
    },
    "daemonset-controller": {
        "users": [kcm_sa("daemon-set-controller"), KCM_USER],
        "creates": [{"owner": "apps/DaemonSet", "kind": "Pod"}],
    },
    "job-controller": {
        "users": [kcm_sa("job-controller"), KCM_USER],
        "creates": [{"owner": "batch/Job", "kind": "Pod"}],
    },
    "cronjob-controller": {
        "users": [kcm_sa("cronjob-controller"), KCM_USER],
        "creates": [{"owner": "batch/CronJob", "kind": "batch/Job"}],
    },
    # JobSet (jobset-system, upstream manifests and chart).
    "jobset": {
        "users": ["system:serviceaccount:jobset-system:jobset-controller-manager"],
        "creates": [{"owner": "jobset.x-k8s.io/JobSet", "kind": "batch/Job"}],
    },
    # Kubeflow training operator v1 (kubeflow namespace, standalone and platform installs).
    "kubeflow-training-operator": {
        "users": ["system:serviceaccount:kubeflow:training-operator"],
        "creates": [{"owner": f"kubeflow.org/{kind}", "kind": "Pod"}
                    for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")],
    },
    # The standalone MPI operator v2 (mpi-operator namespace): launcher Job (or Pod) and worker Pods.
    "mpi-operator": {
        "users": ["system:serviceaccount:mpi-operator:mpi-operator"],
        "creates": [{"owner": "kubeflow.org/MPIJob", "kind": "Pod"},
                    {"owner": "kubeflow.org/MPIJob", "kind": "batch/Job"}],
    },
    # Kubeflow Trainer v2 (kubeflow-system): a TrainJob becomes a JobSet built from its runtime.  gpuguard
    # judged the TrainJob (with its runtime) at kubectl apply, but the JobSet is the first object that
    # holds the pod templates, so it is mutated (the Trainer applies it server-side and compares nothing
    # gpuguard adds) and not validated again.
    "kubeflow-trainer": {
        "users": ["system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"],
        "creates": [{"owner": "trainer.kubeflow.org/TrainJob", "kind": "jobset.x-k8s.io/JobSet", "mutate": True}],
    },
    # Kubeflow notebook controller: a Notebook becomes a StatefulSet.
    "kubeflow-notebook-controller": {
        "users": ["system:serviceaccount:kubeflow:notebook-controller-service-account"],
        "creates": [{"owner": "kubeflow.org/Notebook", "kind": "apps/StatefulSet"}],
    },
    # KubeRay (chart default service account kuberay-operator; namespace ray-system as documented).
    "kuberay-operator": {
        "users": ["system:serviceaccount:ray-system:kuberay-operator"],
        "creates": [{"owner": "ray.io/RayCluster", "kind": "Pod"},
                    {"owner": "ray.io/RayJob", "kind": "ray.io/RayCluster"},
                    {"owner": "ray.io/RayJob", "kind": "batch/Job"},
                    {"owner": "ray.io/RayService", "kind": "ray.io/RayCluster"}],
    },
    # Volcano (volcano-system): a Volcano Job's task pods.
    "volcano-controllers": {
        "users": ["system:serviceaccount:volcano-system:volcano-controllers"],
        "creates": [{"owner": "batch.volcano.sh/Job", "kind": "Pod"}],
    },
    # LeaderWorkerSet (lws-system): the leader StatefulSet (owned by the LWS) and each group's
    # worker StatefulSet (owned by the leader Pod).
    "lws": {
        "users": ["system:serviceaccount:lws-system:lws-controller-manager"],
        "creates": [{"owner": "leaderworkerset.x-k8s.io/LeaderWorkerSet", "kind": "apps/StatefulSet"},
                    {"owner": "Pod", "kind": "apps/StatefulSet"}],
    },
    # Argo Workflows (namespace argo; the Helm chart's and the quick-start's service accounts): a
    # workflow's step pods, and the Workflows a CronWorkflow starts.
    "argo-workflow-controller": {
        "users": ["system:serviceaccount:argo:argo-workflows-workflow-controller",
                  "system:serviceaccount:argo:argo"],
        "creates": [{"owner": "argoproj.io/Workflow", "kind": "Pod"},
                    {"owner": "argoproj.io/CronWorkflow", "kind": "argoproj.io/Workflow"}],
    },
    # Kubeflow Spark operator (namespace spark-operator; chart v2 and v1 service accounts): the driver
    # pod spark-submit creates, and a ScheduledSparkApplication's runs.  Executor pods are created by
    # the driver under the application's own service account, so they are judged as user pods.
    "spark-operator": {
        "users": ["system:serviceaccount:spark-operator:spark-operator-controller",
                  "system:serviceaccount:spark-operator:spark-operator"],
        "creates": [{"owner": "sparkoperator.k8s.io/SparkApplication", "kind": "Pod"},
                    {"owner": "sparkoperator.k8s.io/ScheduledSparkApplication",
                     "kind": "sparkoperator.k8s.io/SparkApplication"}],
    },
    # KServe (kserve namespace): raw-deployment predictors become Deployments.
    "kserve": {
        "users": ["system:serviceaccount:kserve:kserve-controller-manager"],
        "creates": [{"owner": "serving.kserve.io/InferenceService", "kind": "apps/Deployment"}],
    },
}


def parse_group_kind(text: str) -> GroupKind:
    """``"apps/ReplicaSet"`` -> ``("apps", "ReplicaSet")``; ``"Pod"`` -> ``("", "Pod")``."""
    group, _, kind = text.rpartition("/")
    return group, kind


def api_group(api_version: Any) -> str:
    """``batch/v1`` -> ``batch``; ``v1`` -> ``""``."""
    if not isinstance(api_version, str):
        return ""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


@dataclass(frozen=True)
class ControllerOrigin:
    """What made an object: a trusted controller, for its controlling owner."""

    controller: str  # the trustedControllers entry name
    owner: GroupKind
    owner_name: str
    mutate: bool = False  # the controller's objects still get gpuguard's mutations (see the table)

    @property
    def reason(self) -> str:
        group, kind = self.owner
        owner = f"{kind}.{group}" if group else kind
        return (f"created by {self.controller} from {owner} {self.owner_name}, whose template gpuguard "
                "checked")


class TrustedControllers:
    """The compiled table: (username, owner GroupKind, created GroupKind) -> controller name."""

    def __init__(self, entries: Mapping[str, tuple[Iterable[str], Iterable[tuple[GroupKind, GroupKind, bool]]]]):
        self._edges: dict[tuple[str, GroupKind, GroupKind], tuple[str, bool]] = {}
        users: set[str] = set()
        for name, (usernames, edges) in entries.items():
            for user in usernames:
                users.add(user)
                for owner, child, mutate in edges:
                    self._edges.setdefault((user, owner, child), (name, mutate))
        self._users = frozenset(users)

    def is_controller(self, username: str) -> bool:
        """Whether the requester is a trusted controller at all (whatever the object)."""
        return username in self._users

    def origin(self, obj: dict, username: str) -> ControllerOrigin | None:
        """The controller that made ``obj`` in this request, or ``None`` (then it is a user's object)."""
        if username not in self._users:  # the common case (users): one set lookup
            return None
        meta = obj.get("metadata")
        refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
        if not isinstance(refs, list):
            return None
        child = (api_group(obj.get("apiVersion")), obj.get("kind"))
        for ref in refs:
            if not isinstance(ref, dict) or ref.get("controller") is not True:
                continue
            if not isinstance(ref.get("kind"), str) or not isinstance(child[1], str):
                return None  # malformed: the apiserver refuses it; it grants nothing
            owner = (api_group(ref.get("apiVersion")), ref.get("kind"))
            edge = self._edges.get((username, owner, child))  # type: ignore[arg-type]
            if edge is not None:
                return ControllerOrigin(edge[0], owner, str(ref.get("name", "")), edge[1])
            return None  # one controller reference only: a wrong one grants nothing
        return None
