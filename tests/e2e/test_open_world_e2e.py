"""Open world through a real kube-apiserver, as the ordinary user ``alice`` in fresh namespaces.

With the shipped default config (no namespace granted anything), a plain vLLM Deployment, a KServe
InferenceService and a Kubeflow Notebook are admitted and mutated as what they are, with non-preempting
priority classes, while a training Job without checkpoints is still denied; a checkpointed 3-day Job whose
command only looks like a smoke test keeps its deadline through create and update.  An admin adds a kind
gpuguard has never heard of by configuration alone (its CRD installed, no code), and alice's apply of it is
judged.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, in_force
from tests.support.tenant import TenantEnv

pytestmark = pytest.mark.e2e

KIND_CONFIG = textwrap.dedent("""\
    kinds:
    - group: recsys.example.com
      versions: [v1]
      kind: ShardedTrainer
      plural: shardedtrainers
      workloadClass: training
      gang: true
    """)
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "shardedtrainers.recsys.example.com"},
    "spec": {"group": "recsys.example.com", "scope": "Namespaced",
             "names": {"kind": "ShardedTrainer", "listKind": "ShardedTrainerList", "plural": "shardedtrainers",
                       "singular": "shardedtrainer"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def _config() -> str:
    """The shipped default, plus one kind added by configuration (nothing else changed: no grants)."""
    return DEFAULT_CONFIG.read_text() + "\n" + KIND_CONFIG


@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("inferenceservice", "servingruntime", "clusterservingruntime", "notebook")
    cp.kubectl("apply", "-f", "-", input=json.dumps(CRD))
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/shardedtrainers.recsys.example.com")
    e = TenantEnv(cp, "open")
    probe = e.namespace()
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), _config(),
                  lambda: e.apply(_job(probe, "probe", ckpt=False)).returncode != 0):
        yield e


def _meta(ns: str, name: str, **labels: str) -> dict:
    return {"name": name, "namespace": ns, **({"labels": labels} if labels else {})}


def _container(name: str, image: str, gpus: int, **extra: object) -> dict:
    return {"name": name, "image": image, "resources": {"limits": {"nvidia.com/gpu": gpus}}, **extra}


def _job(ns: str, name: str, ckpt: bool, command: list[str] | None = None, deadline: int | None = None) -> dict:
    container = _container("trainer", "registry.example/llm/pretrain:2026.11", 8,
                           command=command or ["torchrun", "--nproc_per_node=8", "train.py"])
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if ckpt:
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
        spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    job: dict = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(ns, name),
                 "spec": {"template": {"spec": spec}}}
    if deadline is not None:
        job["spec"]["activeDeadlineSeconds"] = deadline
    return job


def _pod_spec(stored: dict) -> dict:
    return stored["spec"]["template"]["spec"]


def test_a_vllm_deployment_is_a_server_on_a_fresh_install(env):
    ns = env.namespace()
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(ns, "chat"),
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "chat"}}, "template": {
                      "metadata": {"labels": {"app": "chat"}}, "spec": {"containers": [_container(
                          "vllm", "vllm/vllm-openai:v0.11.0", 1, args=["--model", "Qwen/Qwen3-8B"])]}}}}
    applied = env.apply(deployment)
    assert applied.returncode == 0, applied.stderr
    spec = _pod_spec(env.get("deployment", "chat", "-n", ns))
    assert spec["priorityClassName"] == "inference-standard"  # a server, not granted preemption here
    assert spec["tolerations"] and spec["containers"][0]["resources"]["requests"]["memory"]


def test_a_kserve_inferenceservice_is_admitted_and_mutated(env):
    ns = env.namespace()
    isvc = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {**_meta(ns, "qwen"), "annotations": {"serving.kserve.io/deploymentMode": "RawDeployment"}},
            "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"},
                                             "args": ["--model_id=Qwen/Qwen2.5-7B-Instruct"],
                                             "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "24Gi"}}}}}}
    applied = env.apply(isvc)
    assert applied.returncode == 0, applied.stderr
    stored = env.get("inferenceservice", "qwen", "-n", ns)
    assert stored["spec"]["predictor"]["priorityClassName"] == "inference-standard"
    assert stored["spec"]["predictor"]["tolerations"]


def test_a_kubeflow_notebook_is_admitted_as_a_notebook(env):
    ns = env.namespace()
    notebook = {"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": _meta(ns, "lab"),
                "spec": {"template": {"spec": {"containers": [_container(
                    "lab", "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0", 1)]}}}}
    applied = env.apply(notebook)
    assert applied.returncode == 0, applied.stderr
    assert _pod_spec(env.get("notebook", "lab", "-n", ns))["priorityClassName"] == "notebook-dev"


def test_a_training_job_without_checkpoints_is_still_denied(env):
    ns = env.namespace()
    denied = env.apply(_job(ns, "pretrain", ckpt=False))
    assert denied.returncode != 0 and "[checkpoint-volume]" in denied.stderr


def test_a_multi_day_checkpointed_job_keeps_its_deadline_through_create_and_update(env):
    ns = env.namespace()
    three_days = 259200
    job = _job(ns, "long", ckpt=True, command=["sh", "-c", "nvidia-smi; python -m lab.run"], deadline=three_days)
    applied = env.apply(job)
    assert applied.returncode == 0, applied.stderr
    assert env.get("job", "long", "-n", ns)["spec"]["activeDeadlineSeconds"] == three_days
    patched = env.cp.kubectl("--as=alice", "patch", "job", "long", "-n", ns, "--type=merge", "-p",
                             json.dumps({"spec": {"suspend": True}}), check=False)
    assert patched.returncode == 0, patched.stderr
    stored = env.get("job", "long", "-n", ns)
    assert stored["spec"]["suspend"] is True and stored["spec"]["activeDeadlineSeconds"] == three_days


def test_a_kind_added_by_configuration_is_judged_at_apply(env):
    ns = env.namespace()

    def trainer(name: str, workers: int, ckpt: bool) -> dict:
        container = _container("worker", "registry.example/recsys/trainer:12", 4)
        pod: dict = {"containers": [container]}
        if ckpt:
            container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
            pod["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
        return {"apiVersion": "recsys.example.com/v1", "kind": "ShardedTrainer", "metadata": _meta(
                    ns, name, **{"kueue.x-k8s.io/queue-name": "team"}),
                "spec": {"shards": {"dense": {"replicas": workers, "template": {"spec": pod}}}}}

    denied = env.apply(trainer("no-ckpt", 2, ckpt=False))
    assert denied.returncode != 0 and "[checkpoint-volume]" in denied.stderr
    admitted = env.apply(trainer("ok", 2, ckpt=True))
    assert admitted.returncode == 0, admitted.stderr
    stored = env.get("shardedtrainer", "ok", "-n", ns)
    pod = stored["spec"]["shards"]["dense"]["template"]["spec"]
    assert pod["priorityClassName"] == "training-standard" and pod["tolerations"]
