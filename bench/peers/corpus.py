"""A generated manifest corpus for the CLI comparison: N files of mixed kinds, GPU and not, good and bad.

Why generated: the comparison needs the same 1,000 manifests for ``gpuguard audit`` and
``kubectl-kyverno apply``, reproducible without checking a thousand files in.  The mix is what a
platform repository holds: mostly Deployments, Jobs and Pods, some CronJobs, StatefulSets and
PyTorchJobs, a few Services and ConfigMaps (no pod template: both tools must skip them), and
GPU workloads that break a policy now and then (no checkpoint storage, no memory limit, too many
GPUs, a GPU request that differs from its limit).  Deterministic: the same ``seed`` gives the
same files.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

# kind -> weight in the mix
MIX = {"Deployment": 25, "Job": 20, "Pod": 15, "CronJob": 8, "StatefulSet": 7, "PyTorchJob": 10,
       "Service": 8, "ConfigMap": 7}
FLAWS = ("none", "none", "none", "no-checkpoint", "no-memory-limit", "too-many-gpus", "request-not-limit")


def _container(rng: random.Random, gpus: int, flaw: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": f"ghcr.io/example/app:{rng.randint(1, 9)}.{rng.randint(0, 9)}"}
    if gpus:
        limits: dict[str, Any] = {"nvidia.com/gpu": gpus}
        if flaw != "no-memory-limit":
            limits["memory"] = f"{16 * gpus * rng.choice((1, 2, 4))}Gi"
        c["resources"] = {"limits": limits}
        if flaw == "request-not-limit":
            c["resources"]["requests"] = {"nvidia.com/gpu": max(1, gpus - 1) if gpus > 1 else 2}
        if flaw != "no-checkpoint":
            c["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    else:
        c["resources"] = {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    return c


def _pod_spec(rng: random.Random, gpus: int, flaw: str, restart: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [_container(rng, gpus, flaw)]}
    if gpus and flaw != "no-checkpoint":
        spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    if restart:
        spec["restartPolicy"] = restart
    return spec


def manifest(kind: str, index: int, rng: random.Random) -> dict[str, Any]:
    """One object of ``kind``; about half of the workloads request GPUs, some of those have a flaw."""
    gpu = kind not in ("Service", "ConfigMap") and rng.random() < 0.55
    flaw = rng.choice(FLAWS) if gpu else "none"
    gpus = (12 if flaw == "too-many-gpus" else rng.choice((1, 1, 2, 4, 8))) if gpu else 0
    name = f"{kind.lower()}-{index:04d}"
    meta = {"name": name, "namespace": f"team-{index % 7}", "labels": {"app": name}}
    if kind == "Service":
        return {"apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]}}
    if kind == "ConfigMap":
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"config.yaml": "a: 1\n"}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _pod_spec(rng, gpus, flaw, "Never")}
    template = {"metadata": {"labels": {"app": name}}, "spec": _pod_spec(rng, gpus, flaw)}
    if kind in ("Deployment", "StatefulSet"):
        spec: dict[str, Any] = {"replicas": rng.choice((1, 2, 3)), "selector": {"matchLabels": {"app": name}},
                                "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = name
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": spec}
    template["spec"]["restartPolicy"] = "Never"
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": template}}
    if kind == "CronJob":
        return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": template}}}}
    template["spec"]["restartPolicy"] = "OnFailure"
    template["spec"]["schedulerName"] = "volcano"
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": rng.choice((1, 3)), "template": template}}}}


def generate(out: Path, count: int = 1000, seed: int = 15) -> list[Path]:
    """Write ``count`` one-object YAML files into ``out`` (created); their paths, in order."""
    rng = random.Random(seed)
    kinds = list(MIX)
    weights = [MIX[k] for k in kinds]
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        kind = rng.choices(kinds, weights)[0]
        path = out / f"{i:04d}-{kind.lower()}.yaml"
        path.write_text(yaml.safe_dump(manifest(kind, i, rng), sort_keys=False))
        paths.append(path)
    return paths
