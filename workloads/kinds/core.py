"""The built-in kinds (core, ``batch``, ``apps``) and the kube-controller-manager controllers that create
their children.

kube-controller-manager runs each controller under its own service account
(``--use-service-account-credentials``, the default of every kubeadm and managed cluster), or, without
that flag, as its own user ``system:kube-controller-manager``: both identities are trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gpuguard.workloads.kinds.spec import Creates, Gang, JobFields, KindSpec, Operator, TemplateRef, VolumeClaims
from gpuguard.workloads.kinds.templates import job_replicas, template_at
from gpuguard.workloads.paths import Path, get_path

KCM_USER = "system:kube-controller-manager"


def kcm_sa(name: str) -> str:
    """kube-controller-manager's per-controller identity, e.g. ``replicaset-controller``."""
    return f"system:serviceaccount:kube-system:{name}"


def _kcm(name: str, account: str | None = None) -> Operator:
    return Operator(name, (kcm_sa(account or name), KCM_USER))


REPLICASET_CONTROLLER = _kcm("replicaset-controller")
DEPLOYMENT_CONTROLLER = _kcm("deployment-controller")
STATEFULSET_CONTROLLER = _kcm("statefulset-controller")
DAEMONSET_CONTROLLER = _kcm("daemonset-controller", "daemon-set-controller")
JOB_CONTROLLER = _kcm("job-controller")
CRONJOB_CONTROLLER = _kcm("cronjob-controller")

# Pod templates of the kinds that keep one at ``spec.template``.
_SPEC_TEMPLATE = (("spec", "template", "spec"),)


def _pod(obj: dict) -> Iterator[TemplateRef]:
    yield TemplateRef("pod", ("spec",), ("metadata",), 1)


def _job(obj: dict) -> Iterator[TemplateRef]:
    yield TemplateRef("job", ("spec", "template", "spec"), ("spec", "template", "metadata"),
                      job_replicas(get_path(obj, ("spec",))))


_JOB_TEMPLATE: tuple[str, ...] = ("spec", "jobTemplate", "spec")


def _cronjob(obj: dict) -> Iterator[TemplateRef]:
    yield TemplateRef("job", _JOB_TEMPLATE + ("template", "spec"), _JOB_TEMPLATE + ("template", "metadata"),
                      job_replicas(get_path(obj, _JOB_TEMPLATE)))


def _job_controller_gap(job_spec_path: Path) -> Callable[[dict], str | None]:
    """Why kube-controller-manager's Job controller (1.36+, WorkloadWithJob) would not make a gang of the Job at
    ``job_spec_path``: it does only for an Indexed Job whose ``parallelism`` (above 1) equals its ``completions``
    (``pkg/controller/job/util.IsGangSchedulingCandidate``); ``None`` where it would."""

    def gap(obj: dict) -> str | None:
        spec = get_path(obj, job_spec_path)
        spec = spec if isinstance(spec, dict) else {}
        parallelism, completions = spec.get("parallelism", 1), spec.get("completions")
        if spec.get("completionMode") != "Indexed":
            return "completionMode is not Indexed"
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism <= 1:
            return "parallelism is not above 1"
        if completions != parallelism:
            return f"completions ({completions}) differ from parallelism ({parallelism})"
        return None

    return gap


POD = KindSpec("", "Pod", "pods", ("v1",), "training", _pod,
               JobFields(deadline=("spec", "activeDeadlineSeconds")), immutable=(("spec",),),
               pod_spec_paths=(("spec",),))
JOB = KindSpec("batch", "Job", "jobs", ("v1",), "training", _job,
               JobFields(ttl=("spec", "ttlSecondsAfterFinished"), deadline=("spec", "activeDeadlineSeconds"),
                         backoff=("spec", "backoffLimit"), backoff_api_default=6),
               gang=Gang(controller_gap=_job_controller_gap(("spec",))), immutable=(("spec", "template"),),
               pod_spec_paths=_SPEC_TEMPLATE, controllers=(Creates(JOB_CONTROLLER, ("Pod",)),))
CRONJOB = KindSpec("batch", "CronJob", "cronjobs", ("v1",), "training", _cronjob,
                   JobFields(ttl=_JOB_TEMPLATE + ("ttlSecondsAfterFinished",),
                             deadline=_JOB_TEMPLATE + ("activeDeadlineSeconds",),
                             # Unlike a Job's, a CronJob's job template is not defaulted before admission: an
                             # explicit backoffLimit: 6 is the user's.
                             backoff=_JOB_TEMPLATE + ("backoffLimit",)),
                   gang=Gang(controller_gap=_job_controller_gap(_JOB_TEMPLATE)),
                   pod_spec_paths=(_JOB_TEMPLATE + ("template", "spec"),),
                   controllers=(Creates(CRONJOB_CONTROLLER, ("batch/Job",)),))
DEPLOYMENT = KindSpec("apps", "Deployment", "deployments", ("v1",), "inference",
                      template_at(("spec",), ("spec", "replicas")), scale_replicas=("spec", "replicas"),
                      pod_spec_paths=_SPEC_TEMPLATE,
                      controllers=(Creates(DEPLOYMENT_CONTROLLER, ("apps/ReplicaSet",)),))
STATEFULSET = KindSpec("apps", "StatefulSet", "statefulsets", ("v1",), "inference",
                       template_at(("spec",), ("spec", "replicas")),
                       volume_claims=VolumeClaims(("spec", "volumeClaimTemplates"), "claim-templates"),
                       scale_replicas=("spec", "replicas"), pod_spec_paths=_SPEC_TEMPLATE,
                       controllers=(Creates(STATEFULSET_CONTROLLER, ("Pod",)),))
REPLICASET = KindSpec("apps", "ReplicaSet", "replicasets", ("v1",), "inference",
                      template_at(("spec",), ("spec", "replicas")), scale_replicas=("spec", "replicas"),
                      pod_spec_paths=_SPEC_TEMPLATE, controllers=(Creates(REPLICASET_CONTROLLER, ("Pod",)),))
DAEMONSET = KindSpec("apps", "DaemonSet", "daemonsets", ("v1",), "inference", template_at(("spec",)),
                     pod_spec_paths=_SPEC_TEMPLATE, controllers=(Creates(DAEMONSET_CONTROLLER, ("Pod",)),),
                     per_node=True)
