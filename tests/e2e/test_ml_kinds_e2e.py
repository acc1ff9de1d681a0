"""ML workloads as they are written, judged at ``kubectl apply`` through a real kube-apiserver.

Each kind's CRD is installed (an open-schema stand-in, ``cluster/crds/``); no operator runs, so
what is checked is what the apiserver stores from the user's apply, and what gpuguard answers
when the operator's own identity creates the objects it derives.  Users act as ``alice`` with a
namespace-scoped RoleBinding, operators as their service accounts (``kubectl --as``).
"""

from __future__ import annotations

import json

import pytest

from gpuguard.workloads.kinds.trainer import TRAINJOB
from tests.support.gpuguard_process import ROOT, default_config_with, in_force
from tests.support.tenant import TenantEnv, dump

pytestmark = pytest.mark.e2e
TRAINER = "system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager"
KNATIVE = "system:serviceaccount:knative-serving:controller"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}





@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("jobset", "trainjob", "clustertrainingruntime", "trainingruntime", "inferenceservice",
                    "servingruntime", "clusterservingruntime", "rayservice", "sparkapplication", "workflow",
                    "service")  # Knative Serving's Service
    # KServe's shipped runtime for the huggingface format (its pods take the predictor's resources).
    cp.kubectl("apply", "-f", "-", input=dump({
        "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
        "metadata": {"name": "kserve-huggingfaceserver"},
        "spec": {"supportedModelFormats": [{"name": "huggingface", "version": "1", "autoSelect": True}],
                 "containers": [{"name": "kserve-container", "image": "kserve/huggingfaceserver:v0.15.2"}]}}))
    e = TenantEnv(cp, "ml")
    probe = e.namespace()
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), default_config_with("ml-exempt"), lambda: "priorityClassName"
                  in json.dumps(e.get("rayservice", "probe", "-n", probe)
                                if e.apply(rayservice(probe, "probe")).returncode == 0 else {}),
                  kubeconfig=cp.kubeconfig):
        yield e


# ---------------------------------------------------------------- Kubeflow Trainer v2

def runtime(name: str, *, pod_group: bool, checkpoints: bool) -> dict:
    node: dict = {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
                  "command": ["torchrun", "train.py"]}
    pod: dict = {"restartPolicy": "OnFailure", "containers": [node]}
    if checkpoints:
        node["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
        pod["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "team-checkpoints"}}]
    initializer = {"name": "model-initializer", "template": {
        "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "model-initializer"}},
        "spec": {"template": {"spec": {"restartPolicy": "OnFailure", "containers": [
            {"name": "model-initializer", "image": "ghcr.io/kubeflow/trainer/model-initializer"}]}}}}}
    spec: dict = {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                  "template": {"spec": {"replicatedJobs": [initializer, {
                      "name": "node", "dependsOn": [{"name": "model-initializer", "status": "Complete"}],
                      "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                   "spec": {"template": {"spec": pod}}}}]}}}
    if pod_group:
        spec["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": name}, "spec": spec}


def trainjob(ns: str, name: str, runtime_name: str, nodes: int) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"runtimeRef": {"name": runtime_name},
                     "trainer": {"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}}


def test_trainjob_is_judged_with_its_runtime_at_apply(env):
    env.cp.kubectl("apply", "-f", "-", input=dump(runtime("torch-bare", pod_group=False, checkpoints=False)))
    env.cp.kubectl("apply", "-f", "-", input=dump(runtime("torch-ganged", pod_group=True, checkpoints=True)))
    ns = env.namespace()
    denied = env.apply(trainjob(ns, "bare", "torch-bare", nodes=4))
    assert denied.returncode != 0
    assert "[gang-scheduling] runtime ClusterTrainingRuntime torch-bare: spec" in denied.stderr
    assert "4 GPU pods" in denied.stderr and "[checkpoint-volume]" in denied.stderr
    admitted = env.apply(trainjob(ns, "tune", "torch-ganged", nodes=4))
    assert admitted.returncode == 0, admitted.stderr
    over = env.apply(trainjob(ns, "huge", "torch-ganged", nodes=9))  # 72 GPUs > 64
    assert over.returncode != 0 and "[gpu-request-shape]" in over.stderr


def trainers_jobset(job: dict, runtime_obj: dict, uid: str) -> dict:
    """The JobSet as the Trainer builds it from ``runtime_obj`` at that moment, owned by the TrainJob."""
    assert TRAINJOB.runtime is not None
    made = TRAINJOB.runtime.expand(job, runtime_obj)
    made["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                            "name": job["metadata"]["name"], "uid": uid, "controller": True}]
    return made


def test_the_jobset_the_trainer_generates_is_mutated_and_judged(env):
    ganged = runtime("torch-ganged", pod_group=True, checkpoints=True)
    env.cp.kubectl("apply", "-f", "-", input=dump(ganged))
    ns = env.namespace()
    job = trainjob(ns, "tune", "torch-ganged", nodes=2)
    assert env.apply(job).returncode == 0
    uid = env.get("trainjob", "tune", "-n", ns)["metadata"]["uid"]
    env.cp.kubectl("create", "rolebinding", "trainer", "--clusterrole=cluster-admin", f"--user={TRAINER}", "-n", ns)
    jobset = trainers_jobset(job, ganged, uid)
    by_user = env.apply({**jobset, "metadata": {"name": "by-alice", "namespace": ns}})
    assert by_user.returncode == 0, by_user.stderr  # the same JobSet is fine from anyone: it was judged
    created = env.apply(jobset, user=TRAINER)
    assert created.returncode == 0, created.stderr
    pod = env.get("jobset", "tune", "-n", ns)["spec"]["replicatedJobs"][-1]["template"]["spec"]["template"]["spec"]
    assert GPU_TOLERATION in pod["tolerations"] and pod["containers"][0]["resources"]["limits"]["memory"]


def test_a_runtime_changed_after_its_trainjob_is_judged_on_the_trainers_jobset(env):
    env.cp.kubectl("apply", "-f", "-", input=dump(runtime("torch-later", pod_group=True, checkpoints=True)))
    ns = env.namespace()
    job = trainjob(ns, "later", "torch-later", nodes=2)
    assert env.apply(job).returncode == 0
    uid = env.get("trainjob", "later", "-n", ns)["metadata"]["uid"]
    # The runtime's owner then drops the checkpoint volume; the Trainer builds the JobSet from it as it is now.
    changed = runtime("torch-later", pod_group=True, checkpoints=False)
    env.cp.kubectl("apply", "-f", "-", input=dump(changed))
    env.cp.kubectl("create", "rolebinding", "trainer", "--clusterrole=cluster-admin", f"--user={TRAINER}", "-n", ns)
    refused = env.apply(trainers_jobset(job, changed, uid), user=TRAINER)
    assert refused.returncode != 0 and "[checkpoint-volume]" in refused.stderr, refused.stderr


# ---------------------------------------------------------------- KServe, Ray

def isvc(ns: str, name: str, mode: str | None) -> dict:
    meta: dict = {"name": name, "namespace": ns}
    if mode:
        meta["annotations"] = {"serving.kserve.io/deploymentMode": mode}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": meta,
            "spec": {"predictor": {"minReplicas": 1, "model": {
                "modelFormat": {"name": "huggingface"}, "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct",
                "resources": {"limits": {"nvidia.com/gpu": 1}}}}}}


def test_kserve_predictor_model_form_is_mutated_and_judged(env):
    ns = env.namespace()
    raw = env.apply(isvc(ns, "raw", "RawDeployment"))
    assert raw.returncode == 0, raw.stderr
    predictor = env.get("inferenceservice", "raw", "-n", ns)["spec"]["predictor"]
    assert GPU_TOLERATION in predictor["tolerations"]
    assert predictor["priorityClassName"] == "inference-critical"
    assert predictor["model"]["resources"]["limits"]["memory"] == "64Gi"
    # Knative (the default mode) would refuse tolerations: none are added, and kubectl says why.
    knative = env.apply(isvc(ns, "serverless", None))
    assert knative.returncode == 0, knative.stderr
    assert "kubernetes.podspec-tolerations" in knative.stderr
    stored = env.get("inferenceservice", "serverless", "-n", ns)["spec"]["predictor"]
    assert "tolerations" not in stored and "priorityClassName" not in stored
    assert stored["model"]["resources"]["limits"]["memory"] == "64Gi"


def knative_service(ns: str, name: str) -> dict:
    """A Whisper server as Knative runs one: scaled on requests up to 3 pods, no volumes, nothing to checkpoint."""
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {
                "metadata": {"annotations": {"autoscaling.knative.dev/max-scale": "3"}},
                "spec": {"containers": [{"image": "ghcr.io/example/whisper-server:2",
                                         "args": ["--model", "large-v3", "--port", "8080"],
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


def test_knative_service_is_judged_as_a_server_and_its_revision_deployment_left_to_knative(env):
    ns = env.namespace(KNATIVE)
    applied = env.apply(knative_service(ns, "whisper"))
    assert applied.returncode == 0, applied.stderr  # a server: no checkpoint check
    # Knative refuses tolerations and a priority class unless its config-features enable them: none are added.
    assert "kubernetes.podspec-tolerations" in applied.stderr and "kubernetes.podspec-priorityclassname" in \
        applied.stderr, applied.stderr
    pod = env.get("services.serving.knative.dev", "whisper", "-n", ns)["spec"]["template"]["spec"]
    assert "tolerations" not in pod and "priorityClassName" not in pod
    assert pod["containers"][0]["resources"]["limits"]["memory"] == "64Gi"
    # The revision's Deployment, made by Knative's controller from the template judged above, stays as made
    # (Knative names the user's container).
    pod["containers"][0]["name"] = "user-container"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": "whisper-00001-deployment", "namespace": ns, "ownerReferences": [{
            "apiVersion": "serving.knative.dev/v1", "kind": "Revision", "name": "whisper-00001",
            "uid": "6f1c1f5e-0000-4000-8000-000000000001", "controller": True}]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "whisper"}}, "template": {
            "metadata": {"labels": {"app": "whisper"}}, "spec": pod}}}
    made = env.apply(deployment, user=KNATIVE)
    assert made.returncode == 0, made.stderr
    stored = env.get("deployment", "whisper-00001-deployment", "-n", ns)
    assert "tolerations" not in stored["spec"]["template"]["spec"]
    assert "gpuguard.io/mutated-by" not in (stored["metadata"].get("annotations") or {})


def rayservice(ns: str, name: str, replicas: int = 2, gpus: int = 1, serve: str = "applications: []\n") -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": name, "namespace": ns},
            "spec": {"serveConfigV2": serve, "rayClusterConfig": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                    {"name": "ray-head", "image": "rayproject/ray:2.40.0"}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": replicas, "minReplicas": 1,
                                      "maxReplicas": replicas, "rayStartParams": {}, "template": {"spec": {
                                          "containers": [{"name": "ray-worker", "image": "rayproject/ray:2.40.0",
                                                          "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}]}}}


def test_rayservice_is_mutated_and_its_total_checked(env):
    ns = env.namespace()
    ok = env.apply(rayservice(ns, "serve"))
    assert ok.returncode == 0, ok.stderr
    worker = env.get("rayservice", "serve", "-n", ns)["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    assert GPU_TOLERATION in worker["template"]["spec"]["tolerations"]
    over = env.apply(rayservice(ns, "big", replicas=9, gpus=8))
    assert over.returncode != 0 and "[gpu-request-shape]" in over.stderr


def ray_llm(tensor: int, replicas: int) -> str:
    """A Ray Serve LLM application: ``replicas`` engines of ``tensor`` GPUs each."""
    return ("applications:\n- name: llm\n  import_path: ray.serve.llm:build_openai_app\n  args:\n    llm_configs:\n"
            "    - model_loading_config: {model_id: mistral-small, model_source: mistralai/Mistral-Small-3.2-24B}\n"
            f"      engine_kwargs: {{tensor_parallel_size: {tensor}, max_model_len: 32768}}\n"
            f"      deployment_config: {{num_replicas: {replicas}}}\n")


def test_ray_serve_engines_are_weighed_against_their_ray_cluster(env):
    """What serveConfigV2 fixes (engine_kwargs, replicas) against the cluster's GPUs, at create and at update."""
    ns = env.namespace()
    fits = env.apply(rayservice(ns, "llm", replicas=2, gpus=4, serve=ray_llm(4, 2)))
    assert fits.returncode == 0, fits.stderr
    assert "server-parallelism" not in fits.stderr
    # A model that needs tensor parallelism 16 can't start on 8 GPUs: denied on update, the stored one kept.
    grown = env.apply(rayservice(ns, "llm", replicas=2, gpus=4, serve=ray_llm(16, 1)))
    assert grown.returncode != 0 and "[server-parallelism]" in grown.stderr
    assert "tensor_parallel_size 16 needs 16 GPUs a replica" in grown.stderr
    assert "tensor_parallel_size: 4" in env.get("rayservice", "llm", "-n", ns)["spec"]["serveConfigV2"]
    # One 1-GPU engine on a fixed 8-GPU cluster: admitted, with the idle devices and what they cost.
    idle = env.apply(rayservice(ns, "small", replicas=2, gpus=4, serve=ray_llm(1, 1)))
    assert idle.returncode == 0, idle.stderr
    assert "7 idle, 168 device-hours a day (~$672)" in idle.stderr  # the default price, $4 per nvidia.com/gpu-hour


# ---------------------------------------------------------------- Spark operator

def spark_application(ns: str, name: str, **executor) -> dict:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "Python", "mode": "cluster", "image": "ghcr.io/example/spark-rapids:3.5",
                     "mainApplicationFile": "local:///opt/app/etl.py", "sparkVersion": "3.5.1",
                     "sparkConf": {"spark.plugins": "com.nvidia.spark.SQLPlugin"},
                     "driver": {"cores": 1, "memory": "2g", "serviceAccount": "spark"},
                     "executor": {"cores": 4, "gpu": {"name": "nvidia.com/gpu", "quantity": 1}, **executor}}}


def test_spark_application_is_mutated_and_judged_at_apply(env):
    ns = env.namespace()
    ok = env.apply(spark_application(ns, "etl", instances=4))
    assert ok.returncode == 0, ok.stderr
    stored = env.get("sparkapplication", "etl", "-n", ns)["spec"]
    executor = stored["executor"]
    assert GPU_TOLERATION in executor["tolerations"] and executor["priorityClassName"]
    assert executor["memory"].endswith("m") and "resources" not in executor  # Spark's own fields
    assert stored["driver"] == {"cores": 1, "memory": "2g", "serviceAccount": "spark",
                                "priorityClassName": executor["priorityClassName"]}
    assert stored["timeToLiveSeconds"] == 86400
    again = env.apply(spark_application(ns, "etl", instances=4))  # re-apply: same object, no conflict
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout + again.stderr
    app = spark_application(ns, "grow-forever", instances=2)
    app["spec"]["dynamicAllocation"] = {"enabled": True}
    denied = env.apply(app)
    assert denied.returncode != 0 and "[gpu-request-shape]" in denied.stderr
    assert "spec.dynamicAllocation.maxExecutors" in denied.stderr


# ---------------------------------------------------------------- Argo Workflows

def pipeline(ns: str, name: str, fan_out: int) -> dict:
    train = {"name": "train", "container": {
        "image": "ghcr.io/example/train:1", "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": 8}},
        "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": name, "namespace": ns},
            "spec": {"entrypoint": "main",
                     "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                     "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
                     "templates": [
                         {"name": "main", "steps": [
                             [{"name": "prep", "template": "prep"}],
                             [{"name": "train", "template": "train", "withItems": list(range(fan_out))}]]},
                         {"name": "prep", "container": {"image": "python:3.12", "command": ["python", "prep.py"]}},
                         train]}}


def test_argo_workflow_is_mutated_and_its_peak_judged_at_apply(env):
    ns = env.namespace()
    ok = env.apply(pipeline(ns, "tune", fan_out=2))  # 16 GPUs at the peak
    assert ok.returncode == 0, ok.stderr
    stored = env.get("workflow", "tune", "-n", ns)["spec"]
    prep, train = stored["templates"][1:]
    # The GPU template keeps the workflow's spot toleration it would have inherited, next to the GPU one;
    # the CPU step still inherits.
    assert train["tolerations"] == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}, GPU_TOLERATION]
    assert "tolerations" not in prep
    assert stored["ttlStrategy"] == {"secondsAfterCompletion": 86400}
    over = env.apply(pipeline(ns, "sweep", fan_out=9))  # 72 GPUs at once > 64
    assert over.returncode != 0 and "[gpu-request-shape]" in over.stderr and "72 accelerators" in over.stderr
