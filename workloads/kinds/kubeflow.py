"""Kubeflow (``kubeflow.org``): the training operator's jobs, the MPI operator's MPIJob, and notebooks.

A training-operator job keeps its roles under ``spec.<x>ReplicaSpecs.<Role>.template`` (role keys
are case-insensitive) and its limits, gang scheduling and priority under ``spec.runPolicy``
(``schedulingPolicy`` makes the operator create a PodGroup for a gang scheduler).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, Gang, JobFields, KindSpec, Locate, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count, template_at
from gpuguard.workloads.paths import Path, get_path

# Kubeflow training operator v1 (kubeflow namespace, standalone and platform installs): the role pods.
TRAINING_OPERATOR = Operator("kubeflow-training-operator", ("system:serviceaccount:kubeflow:training-operator",))
# The standalone MPI operator v2 (mpi-operator namespace): launcher Job (or Pod) and worker Pods.
MPI_OPERATOR = Operator("mpi-operator", ("system:serviceaccount:mpi-operator:mpi-operator",))
# Kubeflow notebook controller: a Notebook becomes a StatefulSet.
NOTEBOOK_CONTROLLER = Operator("kubeflow-notebook-controller",
                               ("system:serviceaccount:kubeflow:notebook-controller-service-account",))

_RUN_POLICY = JobFields(ttl=("spec", "runPolicy", "ttlSecondsAfterFinished"),
                        deadline=("spec", "runPolicy", "activeDeadlineSeconds"),
                        backoff=("spec", "runPolicy", "backoffLimit"))
_SCHEDULING_POLICY: Path = ("spec", "runPolicy", "schedulingPolicy")


def _replica_map(field_name: str) -> Locate:
    """``spec.<x>ReplicaSpecs.<Role>.template``, ``replicas`` pods each."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        specs = get_path(obj, ("spec", field_name))
        if not isinstance(specs, dict):
            return
        for role, rspec in specs.items():
            if not isinstance(rspec, dict):
                continue
            base: Path = ("spec", field_name, role, "template")
            yield TemplateRef(str(role), base + ("spec",), base + ("metadata",), count(rspec.get("replicas")))

    return locate


def _training_job(kind: str, plural: str, replica_specs: str, versions: tuple[str, ...] = ("v1",),
                  also: tuple[Creates, ...] = (), scale_role: str | None = None, pod_grouped: bool = True) -> KindSpec:
    """A training-operator job whose roles are under ``spec.<replica_specs>``.

    ``scale_role``: the role the CRD's ``scale`` subresource resizes (``kubectl scale``, an HPA);
    ``pod_grouped``: KAI's pod grouper gangs its replicas by itself (not PaddleJob's).
    """
    return KindSpec("kubeflow.org", kind, plural, versions, "training", _replica_map(replica_specs), _RUN_POLICY,
                    gang=Gang(operator_policy=_SCHEDULING_POLICY, min_available=_SCHEDULING_POLICY + ("minAvailable",),
                              pod_grouped=pod_grouped),
                    priority_class_paths=(_SCHEDULING_POLICY + ("priorityClass",),),
                    pod_spec_paths=(("spec", replica_specs, "{}", "template", "spec"),),
                    controllers=(Creates(TRAINING_OPERATOR, ("Pod",)), *also),
                    scale_replicas=("spec", replica_specs, scale_role, "replicas") if scale_role else None)


# The training operator's PyTorchJob CRD has a scale subresource on its workers (elastic training
# under an HPA): specReplicasPath .spec.pytorchReplicaSpecs.Worker.replicas.
PYTORCHJOB = _training_job("PyTorchJob", "pytorchjobs", "pytorchReplicaSpecs", scale_role="Worker")
TFJOB = _training_job("TFJob", "tfjobs", "tfReplicaSpecs")
MPIJOB = _training_job("MPIJob", "mpijobs", "mpiReplicaSpecs", ("v2beta1", "v1"),
                       also=(Creates(MPI_OPERATOR, ("Pod", "batch/Job")),))
XGBOOSTJOB = _training_job("XGBoostJob", "xgboostjobs", "xgbReplicaSpecs")
PADDLEJOB = _training_job("PaddleJob", "paddlejobs", "paddleReplicaSpecs", pod_grouped=False)
JAXJOB = _training_job("JAXJob", "jaxjobs", "jaxReplicaSpecs")
NOTEBOOK = KindSpec("kubeflow.org", "Notebook", "notebooks", ("v1", "v1beta1"), "notebook", template_at(("spec",)),
                    pod_spec_paths=(("spec", "template", "spec"),),
                    controllers=(Creates(NOTEBOOK_CONTROLLER, ("apps/StatefulSet",)),), class_fixed=True)
