"""Kubeflow Trainer v2 (``trainer.kubeflow.org``): a TrainJob names a TrainingRuntime or
ClusterTrainingRuntime that holds its pod templates, and the Trainer builds a JobSet from both.

gpuguard judges a TrainJob at ``kubectl apply`` as the JobSet its runtime and trainer make
(``expand_trainjob``), reading the runtime from the API.
"""

from __future__ import annotations

import copy

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateSource
from gpuguard.workloads.kinds.templates import count, no_templates
from gpuguard.workloads.paths import dicts, get_path

# Kubeflow Trainer v2 (kubeflow-system).  The JobSet is the first object that holds the pod templates, so it
# is mutated (the Trainer applies it server-side and compares nothing gpuguard adds) and judged in full when
# the Trainer creates it: gpuguard judged the TrainJob with its runtime at kubectl apply, but a runtime
# created or changed since then is only seen here.
TRAINER = Operator("kubeflow-trainer",
                   ("system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",))

TRAINER_STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"


def _trainer_rjobs(jobs: list) -> list[dict]:
    """The replicated jobs that run the trainer: labelled so by the runtime, else named ``node``."""
    labelled = [j for j in jobs if get_path(j, ("template", "metadata", "labels", TRAINER_STEP_LABEL)) == "trainer"]
    return labelled or [j for j in jobs if j.get("name") in ("node", "trainer-node")]


def expand_trainjob(trainjob: dict, runtime: dict) -> dict:
    """The JobSet the Kubeflow Trainer builds from a TrainJob and its runtime (the parts gpuguard judges).

    As the Trainer does: the trainer replicated job runs ``numNodes`` pods (Job parallelism and
    completions, one replica); ``trainer.image``, ``command``, ``args``, ``env`` and ``resourcesPerNode``
    go into every container named ``node`` (and ``launcher`` when MPI runs the launcher as a node); the
    runtime's ``podGroupPolicy`` gangs the pods (coscheduling label / Volcano group annotation); the
    TrainJob's labels (a Kueue queue) go on the JobSet.
    """
    spec = get_path(runtime, ("spec",)) or {}
    jobset_spec = copy.deepcopy(get_path(spec, ("template", "spec")) or {})
    trainer = get_path(trainjob, ("spec", "trainer")) or {}
    trainer = trainer if isinstance(trainer, dict) else {}
    nodes = count(trainer.get("numNodes"), 0) or count(get_path(spec, ("mlPolicy", "numNodes")))
    node_names = {"node"} | ({"launcher"} if get_path(spec, ("mlPolicy", "mpi", "runLauncherAsNode")) else set())
    group_label = None
    if isinstance(get_path(spec, ("podGroupPolicy", "coscheduling")), dict):
        group_label = ("labels", "scheduling.x-k8s.io/pod-group")
    elif isinstance(get_path(spec, ("podGroupPolicy", "volcano")), dict):
        group_label = ("annotations", "scheduling.k8s.io/group-name")
    jobs = [j for j in (jobset_spec.get("replicatedJobs") or []) if isinstance(j, dict)]
    for rjob in _trainer_rjobs(jobs):
        rjob["replicas"] = 1
        job_spec = rjob.setdefault("template", {}).setdefault("spec", {})
        job_spec["parallelism"] = job_spec["completions"] = nodes
    for rjob in jobs:
        pod = get_path(rjob, ("template", "spec", "template"))
        if not isinstance(pod, dict):
            continue
        if group_label:
            pod.setdefault("metadata", {}).setdefault(group_label[0], {})[group_label[1]] = \
                get_path(trainjob, ("metadata", "name")) or "trainjob"
        for _, container in dicts(get_path(pod, ("spec", "containers"))):
            if not isinstance(container.get("name"), str) or container["name"] not in node_names:
                continue
            for key in ("image", "command", "args"):
                if trainer.get(key) is not None:
                    container[key] = copy.deepcopy(trainer[key])
            if isinstance(trainer.get("resourcesPerNode"), dict):
                container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
            if isinstance(trainer.get("env"), list):
                env = {e["name"]: e for _, e in dicts(container.get("env")) if isinstance(e.get("name"), str)}
                env.update({e["name"]: e for _, e in dicts(trainer["env"]) if isinstance(e.get("name"), str)})
                container["env"] = list(env.values())
    meta = trainjob.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {k: copy.deepcopy(meta[k]) for k in ("name", "namespace", "labels") if k in meta},
            "spec": jobset_spec}


TRAINJOB = KindSpec("trainer.kubeflow.org", "TrainJob", "trainjobs", ("v1alpha1",), "training", no_templates,
                    runtime=TemplateSource(("spec", "runtimeRef"), "trainer.kubeflow.org", "ClusterTrainingRuntime",
                                           ("TrainingRuntime",), expand_trainjob,
                                           (("TrainingRuntime", "v1alpha1", "trainingruntimes"),
                                            ("ClusterTrainingRuntime", "v1alpha1", "clustertrainingruntimes"))),
                    controllers=(Creates(TRAINER, ("jobset.x-k8s.io/JobSet",), mutate=True),))
