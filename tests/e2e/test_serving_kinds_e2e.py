"""GPU serving operators' kinds judged at ``kubectl apply`` through a real kube-apiserver.

NVIDIA Dynamo's DynamoGraphDeployment and the NIM Operator's NIMService keep their GPUs outside any
PodSpec (Dynamo's ``gpu`` shorthand, a NIMService's inline ``resources``).  Their CRDs are installed
as open-schema stand-ins and no operator runs: what is checked is what alice's apply stores (denied
over the cap, naming the policy; admitted and mutated in the kind's own fields), and that the
Deployments the operators' identities derive from an admitted object are left as they made them.
"""

from __future__ import annotations

import json

import pytest

from tests.support.gpuguard_process import ROOT, default_config_with, in_force
from tests.support.tenant import TenantEnv

pytestmark = pytest.mark.e2e
DYNAMO = "system:serviceaccount:dynamo-system:dynamo-platform-dynamo-operator-controller-manager"
NIM = "system:serviceaccount:nim-operator:nim-operator-k8s-nim-operator"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
IMAGE = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1"





@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("dynamographdeployment", "dynamocomponentdeployment", "nimservice", "leaderworkerset")
    e = TenantEnv(cp, "serve")
    probe = e.namespace()
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), default_config_with("serve-exempt"), lambda: "tolerations"
                  in json.dumps(e.get("nimservice", "probe", "-n", probe)
                                if e.apply(nimservice(probe, "probe")).returncode == 0 else {}),
                  kubeconfig=cp.kubeconfig):
        yield e


def owned_by(obj: dict, api_version: str, kind: str, name: str, uid: str) -> dict:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                                           "controller": True, "blockOwnerDeletion": True}]
    return obj


def gpu_deployment(ns: str, name: str, gpus: int, replicas: int = 1) -> dict:
    """A Deployment as an operator derives it: a GPU container, none of gpuguard's additions."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                         {"name": "main", "image": IMAGE,
                          "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "64Gi"}}}]}}}}


# ---------------------------------------------------------------- NVIDIA Dynamo

def worker(gpu: str, replicas: int) -> dict:
    return {"componentType": "worker", "replicas": replicas,
            "resources": {"requests": {"gpu": gpu}, "limits": {"gpu": gpu, "memory": "64Gi"}},
            "extraPodSpec": {"mainContainer": {"image": IMAGE, "workingDir": "/workspace/components/backends/vllm",
                                               "command": ["python3", "-m", "dynamo.vllm"],
                                               "args": ["--model", "Qwen/Qwen3-0.6B"]}}}


def graph(ns: str, name: str, decode: dict) -> dict:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"backendFramework": "vllm", "services": {
                "Frontend": {"componentType": "frontend", "replicas": 1, "dynamoNamespace": name,
                             "extraPodSpec": {"mainContainer": {"image": IMAGE}}},
                "VllmDecodeWorker": decode}}}


def test_dynamo_graph_over_the_cap_is_denied_at_apply_naming_the_policy(env):
    ns = env.namespace()
    denied = env.apply(graph(ns, "huge", worker("8", 9)))  # 9 x 8 = 72 GPUs > 64
    assert denied.returncode != 0
    assert "[gpu-request-shape]" in denied.stderr and "72" in denied.stderr, denied.stderr
    multinode = {**worker("8", 3), "multinode": {"nodeCount": 3}}  # 3 x 3 nodes x 8 = 72
    assert "[gpu-request-shape]" in env.apply(graph(ns, "multi", multinode)).stderr


def test_dynamo_graph_is_admitted_and_shaped_in_its_own_fields(env):
    ns = env.namespace()
    admitted = env.apply(graph(ns, "agg", worker("1", 2)))
    assert admitted.returncode == 0, admitted.stderr
    stored = env.get("dynamographdeployment", "agg", "-n", ns)
    decode = stored["spec"]["services"]["VllmDecodeWorker"]
    assert GPU_TOLERATION in decode["extraPodSpec"]["tolerations"]
    assert decode["resources"]["requests"]["cpu"]  # defaults go into Dynamo's shorthand
    assert decode["resources"]["limits"]["memory"] == "64Gi"
    assert "volumes" not in decode["extraPodSpec"]  # Dynamo mounts /dev/shm itself
    assert "tolerations" not in stored["spec"]["services"]["Frontend"]["extraPodSpec"]  # no GPU, nothing added
    assert "default-resources" in stored["metadata"]["annotations"]["gpuguard.io/mutated-by"]


def test_what_the_dynamo_operator_derives_is_left_as_it_made_it(env):
    ns = env.namespace(DYNAMO)
    assert env.apply(graph(ns, "agg", worker("1", 1))).returncode == 0
    graph_uid = env.get("dynamographdeployment", "agg", "-n", ns)["metadata"]["uid"]
    component = owned_by({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment",
                          "metadata": {"name": "agg-vllmdecodeworker", "namespace": ns},
                          "spec": {"serviceName": "VllmDecodeWorker", **worker("1", 1)}},
                         "nvidia.com/v1alpha1", "DynamoGraphDeployment", "agg", graph_uid)
    created = env.apply(component, user=DYNAMO)
    assert created.returncode == 0, created.stderr
    stored = env.get("dynamocomponentdeployment", "agg-vllmdecodeworker", "-n", ns)
    assert "tolerations" not in stored["spec"]["extraPodSpec"]  # as the operator wrote it
    component_uid = stored["metadata"]["uid"]
    derived = owned_by(gpu_deployment(ns, "agg-vllmdecodeworker", 1), "nvidia.com/v1alpha1",
                       "DynamoComponentDeployment", "agg-vllmdecodeworker", component_uid)
    made = env.apply(derived, user=DYNAMO)
    assert made.returncode == 0, made.stderr
    pod = env.get("deployment", "agg-vllmdecodeworker", "-n", ns)["spec"]["template"]["spec"]
    assert "tolerations" not in pod and "priorityClassName" not in pod
    # The same Deployment from alice is a user's: shaped as any other.
    mine = env.apply(gpu_deployment(ns, "mine", 1))
    assert mine.returncode == 0, mine.stderr
    assert GPU_TOLERATION in env.get("deployment", "mine", "-n", ns)["spec"]["template"]["spec"]["tolerations"]


# ---------------------------------------------------------------- NVIDIA NIM Operator

def nimservice(ns: str, name: str, gpus: int = 1, replicas: int = 1, **spec) -> dict:
    return {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService", "metadata": {"name": name, "namespace": ns},
            "spec": {"image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.8.4",
                               "pullPolicy": "IfNotPresent", "pullSecrets": ["ngc-secret"]},
                     "authSecret": "ngc-api-secret",
                     "storage": {"nimCache": {"name": "meta-llama-3-1-8b-instruct", "profile": ""}},
                     "replicas": replicas,
                     "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "48Gi"}},
                     "expose": {"service": {"type": "ClusterIP", "port": 8000}}, **spec}}


def test_nimservice_over_the_cap_is_denied_at_apply_naming_the_policy(env):
    ns = env.namespace()
    denied = env.apply(nimservice(ns, "huge", gpus=8, replicas=9))
    assert denied.returncode != 0 and "[gpu-request-shape]" in denied.stderr and "72" in denied.stderr
    # autoscaled: the HPA's maximum counts
    scaled = nimservice(ns, "scaled", gpus=8, scale={"enabled": True, "hpa": {"minReplicas": 1, "maxReplicas": 9}})
    assert "[gpu-request-shape]" in env.apply(scaled).stderr
    # multi-node: 5 groups of 2 pipeline stages x 8 GPUs = 80
    multinode = nimservice(ns, "multi", gpus=8, replicas=5, multiNode={"parallelism": {"pipeline": 2, "tensor": 8}})
    assert "[gpu-request-shape]" in env.apply(multinode).stderr


def test_nimservice_dra_resources_are_refused_saying_what_could_not_be_checked(env):
    ns = env.namespace()
    refused = env.apply(nimservice(ns, "dra", gpus=0, draResources=[{"resourceClaimTemplateName": "gpu-template"}]))
    assert refused.returncode != 0 and "draResources" in refused.stderr, refused.stderr


def test_nimservice_is_admitted_and_mutated_and_its_operators_deployment_left_alone(env):
    ns = env.namespace(NIM)
    admitted = env.apply(nimservice(ns, "llama", gpus=1, replicas=2))
    assert admitted.returncode == 0, admitted.stderr
    stored = env.get("nimservice", "llama", "-n", ns)
    assert GPU_TOLERATION in stored["spec"]["tolerations"]
    assert stored["spec"]["resources"]["requests"]["cpu"] and stored["spec"]["resources"]["limits"]["memory"] == "48Gi"
    assert "volumes" not in stored["spec"]  # the operator mounts /dev/shm itself
    derived = owned_by(gpu_deployment(ns, "llama", 1, replicas=2), "apps.nvidia.com/v1alpha1", "NIMService",
                       "llama", stored["metadata"]["uid"])
    made = env.apply(derived, user=NIM)
    assert made.returncode == 0, made.stderr
    pod = env.get("deployment", "llama", "-n", ns)["spec"]["template"]["spec"]
    assert "tolerations" not in pod and "priorityClassName" not in pod
