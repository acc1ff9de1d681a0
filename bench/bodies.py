"""Generate the AdmissionReview bodies every benchmark sends (``bench/bodies/*.json``).

Why generated: hand-written JSON drifts out of validity the first time a policy changes; these
are built from Python dicts, shaped like what the apiserver really sends (the object *after*
defaulting: imagePullPolicy, terminationMessagePath, dnsPolicy ... are present, as they are on
the wire), then run through the engine once so the script fails loudly if a body stops being
admitted.  Two files per workload:

* ``NAME.mutate.json``   -- the CREATE review the apiserver sends to ``/mutate``;
* ``NAME.validate.json`` -- the CREATE review it then sends to ``/validate``: the object as
  gpuguard's mutation left it, because the apiserver runs validating webhooks after mutating ones.

Run ``python bench/bodies.py`` (the other benchmarks call :func:`ensure_bodies` themselves).
"""

from __future__ import annotations

import copy
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
BODIES_DIR = HERE / "bodies"
NAMESPACE = "ml-team"

#: The workloads, in the order every table shows them.
NAMES = ("gpu-pod", "gpu-job-pvc", "pytorchjob-4w", "jobset-2x4", "argo-dag", "cpu-deployment", "pod-60kb")
DESCRIPTIONS = {
    "gpu-pod": "bare GPU Pod, CHECKPOINT_URI on S3",
    "gpu-job-pvc": "batch/v1 Job, 2 GPUs, checkpoint PVC",
    "pytorchjob-4w": "PyTorchJob, master + 4 workers x 8 GPUs, PVC, gang",
    "jobset-2x4": "JobSet, leader + 4 workers x 8 GPUs, PVC, Kueue queue",
    "argo-dag": "Argo Workflow, DAG prepare -> 2 x train (8 GPUs) -> evaluate, PVC",
    "cpu-deployment": "non-GPU Deployment (fast path)",
    "pod-60kb": "GPU Pod, 12 containers, ~900 env vars, ~60 KB",
}


# ---------------------------------------------------------------- apiserver defaulting


def _defaulted_container(container: dict[str, Any]) -> dict[str, Any]:
    """A container as the apiserver hands it to admission: defaults filled in."""
    out = {
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "resources": {},
        **container,
    }
    return out


def _defaulted_spec(spec: dict[str, Any], *, restart: str = "Never") -> dict[str, Any]:
    """A pod spec after the apiserver's defaulting (before admission plugins run)."""
    out: dict[str, Any] = {
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "enableServiceLinks": True,
        **spec,
    }
    out["containers"] = [_defaulted_container(c) for c in spec["containers"]]
    return out


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": NAMESPACE, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "creationTimestamp": "2025-01-01T00:00:00Z", "labels": {"app.kubernetes.io/name": name}, **extra}


def _pvc_volume() -> dict[str, Any]:
    return {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}


def _trainer(gpus: int, *, pvc: bool = True, env: list[dict[str, Any]] | None = None,
             name: str = "trainer") -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name, "image": "ghcr.io/example/train:1.4", "command": ["python", "train.py"],
        "args": ["--epochs", "3", "--checkpoint-dir", "/checkpoints"],
        "env": env if env is not None else [{"name": "CHECKPOINT_DIR", "value": "/checkpoints/run-1"}],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    if pvc:
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    return container


# ---------------------------------------------------------------- the workloads


def gpu_pod() -> dict[str, Any]:
    spec = _defaulted_spec({"containers": [_trainer(1, pvc=False, env=[
        {"name": "CHECKPOINT_URI", "value": "s3://team-ckpt/run-1"}])]})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("bare-gpu"), "spec": spec}


def gpu_job_pvc() -> dict[str, Any]:
    spec = _defaulted_spec({"containers": [_trainer(2)], "volumes": [_pvc_volume()]})
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": _meta("bert-finetune"),
        "spec": {"parallelism": 1, "completions": 1, "completionMode": "NonIndexed", "suspend": False,
                 "template": {"metadata": {"labels": {"app": "bert"}}, "spec": spec}},
    }


def pytorchjob() -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        c = _trainer(8)
        c["name"] = "pytorch"
        spec = _defaulted_spec({"containers": [c], "volumes": [_pvc_volume()], "schedulerName": "volcano"},
                               restart="OnFailure")
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"metadata": {"labels": {"app": "llm"}}, "spec": spec}}

    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        # schedulerName volcano gangs the 5 pods only with the group's size (gang-scheduling).
        "metadata": _meta("llm-pretrain", annotations={"scheduling.volcano.sh/group-min-member": "5"}),
        "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(4)}},
    }


def jobset() -> dict[str, Any]:
    def replicated(name: str, count: int) -> dict[str, Any]:
        spec = _defaulted_spec({"containers": [_trainer(8)], "volumes": [_pvc_volume()]})
        return {"name": name, "replicas": count, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": spec}}}}

    # A Kueue queue gangs the JobSet's 5 GPU pods (gang-scheduling).
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": _meta("llm-jobset", labels={"app.kubernetes.io/name": "llm-jobset",
                                                    "kueue.x-k8s.io/queue-name": "training"}),
            "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", 4)]}}


def argo_dag() -> dict[str, Any]:
    def step(name: str, gpus: int) -> dict[str, Any]:
        container = _trainer(gpus) if gpus else {"image": "ghcr.io/example/prep:1", "command": ["python", "prep.py"],
                                                 "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}
        container.pop("name", None)
        return {"name": name, "container": container}

    tasks = [{"name": "prepare", "template": "prep"},
             {"name": "train-a", "template": "train", "depends": "prepare"},
             {"name": "train-b", "template": "train", "depends": "prepare"},
             {"name": "evaluate", "template": "eval", "depends": "train-a && train-b"}]
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": _meta("llm-pipeline"),
            "spec": {"entrypoint": "main", "volumes": [_pvc_volume()],
                     "templates": [{"name": "main", "dag": {"tasks": tasks}}, step("prep", 0), step("train", 8),
                                   step("eval", 1)]}}


def cpu_deployment() -> dict[str, Any]:
    container = {"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "128Mi"}}}
    spec = _defaulted_spec({"containers": [container]}, restart="Always")
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta("web"),
        "spec": {"replicas": 3, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
                 "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }


def pod_60kb() -> dict[str, Any]:
    """A big but plausible pod: a trainer plus sidecars, each with a long generated environment."""
    containers = []
    for i in range(12):
        env = [{"name": f"CONFIG_{i}_{j:03d}", "value": f"value-{i}-{j}-" + "x" * 16} for j in range(74)]
        if i == 0:
            env.append({"name": "CHECKPOINT_DIR", "value": "/checkpoints/run-1"})
            containers.append(_trainer(4, env=env))
        else:
            containers.append({"name": f"sidecar-{i}", "image": f"ghcr.io/example/sidecar-{i}:2.0", "env": env,
                               "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                             "limits": {"cpu": "200m", "memory": "256Mi"}}})
    spec = _defaulted_spec({"containers": containers, "volumes": [_pvc_volume()]})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta("big-pod"), "spec": spec}


BUILDERS = {"gpu-pod": gpu_pod, "gpu-job-pvc": gpu_job_pvc, "pytorchjob-4w": pytorchjob, "jobset-2x4": jobset,
            "argo-dag": argo_dag, "cpu-deployment": cpu_deployment, "pod-60kb": pod_60kb}

_RESOURCES = {"Pod": ("", "v1", "pods"), "Job": ("batch", "v1", "jobs"),
              "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"), "Deployment": ("apps", "v1", "deployments"),
              "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
              "Workflow": ("argoproj.io", "v1alpha1", "workflows")}


def review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview the apiserver sends for a CREATE of ``obj`` by a human user."""
    group, version, resource = _RESOURCES[obj["kind"]]
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"]["name"], "namespace": NAMESPACE, "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "uid": "4b1e3c6e-0000-4000-8000-000000000001",
                         "groups": ["ml-engineers", "system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions",
                        "fieldManager": "kubectl-client-side-apply"},
        },
    }


def build_all() -> dict[str, dict[str, bytes]]:
    """Every body, checked against the default config: ``{name: {"mutate": bytes, "validate": bytes}}``."""
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.decision import RequestContext
    from gpuguard.webhook.engine.core import Engine

    engine = Engine(load_config(None))
    out: dict[str, dict[str, bytes]] = {}
    for name in NAMES:
        obj = BUILDERS[name]()
        ctx = RequestContext(operation="CREATE", namespace=NAMESPACE, username="alice@example.com",
                             groups=("ml-engineers",), mutate=True, validate=False)
        mutated = engine.evaluate(copy.deepcopy(obj), ctx)
        if not mutated.allowed or mutated.error:
            raise SystemExit(f"{name}: /mutate did not admit it: {mutated.error or mutated.denials}")
        vctx = RequestContext(operation="CREATE", namespace=NAMESPACE, username="alice@example.com",
                              groups=("ml-engineers",), mutate=False, validate=True)
        validated = engine.evaluate(copy.deepcopy(mutated.mutated), vctx)
        if not validated.allowed or validated.error:
            raise SystemExit(f"{name}: /validate denied the mutated object: "
                             f"{validated.error or [v.text for v in validated.denials]}")
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuguard-bench/{name}"))
        out[name] = {"mutate": orjson.dumps(review(obj, uid)),
                     "validate": orjson.dumps(review(mutated.mutated, uid))}
    return out


def body_path(name: str, endpoint: str) -> Path:
    """Where the body of ``name`` for ``endpoint`` (mutate | validate) lives."""
    return BODIES_DIR / f"{name}.{endpoint}.json"


# What --check-paths checks (bench/_paths.py): the committed bodies other drivers read as files.
NEEDS = (BODIES_DIR, *(body_path(name, endpoint) for name in NAMES for endpoint in ("mutate", "validate")))


def ensure_bodies() -> dict[str, dict[str, bytes]]:
    """Write the bodies (only files whose content changed) and return them."""
    BODIES_DIR.mkdir(exist_ok=True)
    bodies = build_all()
    for name, pair in bodies.items():
        for endpoint, data in pair.items():
            path = body_path(name, endpoint)
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
    return bodies


def main() -> int:
    """Write the bodies and list their sizes (``--check-paths``: only check the committed ones are there)."""
    from _paths import check_paths, wanted  # here: scripts/generate.py loads this file without bench/ on sys.path

    if wanted():
        return check_paths()
    bodies = ensure_bodies()
    for name, pair in bodies.items():
        print(f"{name:16} mutate {len(pair['mutate']):>7,} B  validate {len(pair['validate']):>7,} B  "
              f"{DESCRIPTIONS[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
