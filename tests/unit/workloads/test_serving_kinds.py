"""The GPU serving operators' kinds: accelerators counted where each operator really keeps them.

Dynamo's ``gpu`` shorthand and ``multinode.nodeCount``, a NIMService's inline ``resources`` with its
autoscaling maximum and multi-node groups, a VLLMRuntime's ``deploymentConfig`` shorthand, AIBrix's
role sets: if any of these counted 0, the per-workload cap would never see the GPUs at ``kubectl apply``,
and the Deployments and LeaderWorkerSets the operators make would be refused later, as operator status.
"""

from __future__ import annotations

import copy

import pytest

from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads.kinds.dynamo import component_pods
from gpuguard.workloads.kinds.nim import nim_pods
from gpuguard.workloads.kinds.vllm import runtime_pods
from gpuguard.workloads.serving import shorthand_resources
from tests.support.engines import evaluate_twice, only

ENGINE = Engine(parse_config_text("kind: GpuguardConfig\n"))
META = {"name": "llm", "namespace": "ml"}


def dgd(services: dict) -> dict:
    return {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "metadata": dict(META),
            "spec": {"backendFramework": "vllm", "services": services}}


def worker(gpu: str | None, replicas: int | None = 1, **extra) -> dict:
    out: dict = {"componentType": "worker", "resources": {"limits": {"memory": "64Gi"}},
                 "extraPodSpec": {"mainContainer": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0",
                                                    "command": ["python3", "-m", "dynamo.vllm"]}}}
    if gpu is not None:
        out["resources"]["limits"]["gpu"] = gpu
        out["resources"]["requests"] = {"gpu": gpu}
    if replicas is not None:
        out["replicas"] = replicas
    out.update(extra)
    return out


FRONTEND = {"componentType": "frontend", "replicas": 1,
            "extraPodSpec": {"mainContainer": {"image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.0"}}}


def nim(**spec) -> dict:
    base = {"image": {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.8.4"},
            "authSecret": "ngc-api-secret", "replicas": 1,
            "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "48Gi"}}}
    return {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService", "metadata": dict(META),
            "spec": {**base, **spec}}


def vllm(resources: dict, replicas: int = 1, **spec) -> dict:
    return {"apiVersion": "production-stack.vllm.ai/v1alpha1", "kind": "VLLMRuntime", "metadata": dict(META),
            "spec": {"model": {"modelURL": "meta-llama/Llama-3.1-8B-Instruct"}, "vllmConfig": {"port": 8000},
                     "deploymentConfig": {"replicas": replicas, "resources": resources,
                                          "image": {"registry": "docker.io", "name": "lmcache/vllm-openai:latest"}},
                     **spec}}


def gpus(obj: dict) -> int:
    return ENGINE.evaluate(copy.deepcopy(obj), RequestContext(namespace="ml")).gpus


# ---------------------------------------------------------------- Dynamo


@pytest.mark.parametrize(("services", "expected"), [
    ({"Frontend": FRONTEND, "VllmDecodeWorker": worker("1")}, 1),
    ({"Frontend": FRONTEND, "VllmDecodeWorker": worker("1", 2), "VllmPrefillWorker": worker("2", 3)}, 8),
    # multinode: each instance is nodeCount pods with the gpu count each (Dynamo: total = nodes x gpu)
    ({"TrtllmWorker": worker("8", 2, multinode={"nodeCount": 2})}, 32),
    # autoscaled: the most pods the autoscaler may make
    ({"VllmDecodeWorker": worker("2", 1, autoscaling={"enabled": True, "minReplicas": 1, "maxReplicas": 5})}, 10),
    ({"VllmDecodeWorker": worker("2", None)}, 2),  # replicas default 1
    ({"Frontend": FRONTEND}, 0),
])
def test_dynamo_counts_the_gpu_shorthand_per_pod_instances_and_nodes(services, expected):
    assert gpus(dgd(services)) == expected


def test_dynamo_gpu_type_names_the_resource_and_the_main_container_counts_without_shorthand():
    amd = worker("4", 2)
    amd["resources"]["limits"]["gpuType"] = amd["resources"]["requests"]["gpuType"] = "amd.com/gpu"
    decision = ENGINE.evaluate(dgd({"W": amd}), RequestContext(namespace="ml"))
    assert decision.gpus == 8 and decision.gpus_by_resource == {"amd.com/gpu": 8}
    plain = worker(None)
    plain["extraPodSpec"]["mainContainer"]["resources"] = {"limits": {"nvidia.com/gpu": 2, "memory": "64Gi"}}
    assert gpus(dgd({"W": plain})) == 2
    # the shorthand overrides the container's own count, as the operator writes it over
    plain["resources"]["limits"]["gpu"] = "4"
    assert gpus(dgd({"W": plain})) == 4


def test_dynamo_over_the_cap_is_denied_at_apply_and_the_component_deployment_too():
    decision = ENGINE.evaluate(dgd({"VllmDecodeWorker": worker("8", 9)}), RequestContext(namespace="ml"))
    assert decision.gpus == 72 and not decision.allowed
    assert any(v.policy == "gpu-request-shape" and "72" in v.message for v in decision.denials)
    dcd = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoComponentDeployment", "metadata": dict(META),
           "spec": {"serviceName": "VllmDecodeWorker", **worker("8", 9)}}
    assert gpus(dcd) == 72


def test_dynamo_defaults_land_in_the_shorthand_and_the_operator_shm_is_kept():
    obj = dgd({"W": worker("2", 1)})
    decision = evaluate_twice(ENGINE, obj)
    service = decision.mutated["spec"]["services"]["W"]
    assert service["resources"]["requests"]["cpu"] and service["resources"]["limits"]["memory"] == "64Gi"
    assert "ephemeral-storage" not in service["resources"]["requests"]  # the shorthand has no such field
    pod = service["extraPodSpec"]
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    assert "volumes" not in pod and "volumeMounts" not in pod["mainContainer"]  # Dynamo mounts /dev/shm itself
    # with sharedMemory disabled the pod gets gpuguard's /dev/shm
    off = dgd({"W": worker("2", 1, sharedMemory={"disabled": True})})
    mounted = only("shm-volume").evaluate(off).mutated["spec"]["services"]["W"]["extraPodSpec"]
    assert mounted["mainContainer"]["volumeMounts"][0]["mountPath"] == "/dev/shm"


def test_dynamo_service_without_extra_pod_spec_is_counted_and_left_without_one_when_nothing_is_written():
    bare = {"componentType": "worker", "replicas": 2,
            "resources": {"limits": {"gpu": "8", "memory": "64Gi", "cpu": "8"}}}
    assert gpus(dgd({"W": bare})) == 16
    shaped = only("gpu-memory-guard").evaluate(dgd({"W": copy.deepcopy(bare)}))
    assert shaped.patch == [] and "extraPodSpec" not in shaped.mutated["spec"]["services"]["W"]
    tolerated = evaluate_twice(only("gpu-tolerations"), dgd({"W": copy.deepcopy(bare)}))
    assert tolerated.mutated["spec"]["services"]["W"]["extraPodSpec"]["tolerations"]


def test_dynamo_component_pods_reads_user_input_defensively():
    assert component_pods({"replicas": "3", "multinode": {"nodeCount": None}}) == 1
    assert component_pods({"replicas": 2, "multinode": {"nodeCount": 4}}) == 8
    assert shorthand_resources({"gpu": "2", "custom": {"rdma/ib": "1"}}) == {"nvidia.com/gpu": "2", "rdma/ib": "1"}
    assert shorthand_resources("8") == {}


# ---------------------------------------------------------------- NIMService


@pytest.mark.parametrize(("spec", "expected"), [
    ({}, 1),
    ({"replicas": 3, "resources": {"limits": {"nvidia.com/gpu": 2, "memory": "96Gi"}}}, 6),
    # HPA on: up to maxReplicas
    ({"replicas": 1, "scale": {"enabled": True, "hpa": {"minReplicas": 1, "maxReplicas": 10}}}, 10),
    # HPA described but off: replicas
    ({"replicas": 2, "scale": {"enabled": False, "hpa": {"maxReplicas": 10}}}, 2),
    # multi-node: a LeaderWorkerSet group of pipeline-parallel pods, each with the resources
    ({"replicas": 1, "multiNode": {"parallelism": {"pipeline": 2, "tensor": 8}},
      "resources": {"limits": {"nvidia.com/gpu": 8, "memory": "512Gi"}}}, 16),
])
def test_nimservice_counts_inline_resources_times_replicas_autoscaling_and_groups(spec, expected):
    assert gpus(nim(**spec)) == expected


def test_nimservice_over_the_cap_is_denied_naming_the_policy():
    decision = ENGINE.evaluate(nim(replicas=9, resources={"limits": {"nvidia.com/gpu": 8, "memory": "512Gi"}}),
                               RequestContext(namespace="ml"))
    assert not decision.allowed and decision.gpus == 72
    shape = [v for v in decision.denials if v.policy == "gpu-request-shape"]
    assert shape and "72" in shape[0].message and shape[0].path.startswith("spec")


def test_nimservice_is_mutated_in_its_own_fields_and_keeps_the_operator_shm():
    decision = evaluate_twice(ENGINE, nim())
    spec = decision.mutated["spec"]
    assert any(t.get("key") == "nvidia.com/gpu" for t in spec["tolerations"])
    assert spec["resources"]["requests"]["cpu"] and spec["resources"]["limits"]["memory"] == "48Gi"
    assert "volumes" not in spec and "volumeMounts" not in spec  # the operator mounts dshm itself


def test_nimservice_dra_resources_cant_be_counted_so_it_is_refused_unless_failure_mode_open():
    obj = nim(resources={"limits": {"memory": "48Gi"}},
              draResources=[{"resourceClaimTemplateName": "gpu-claim-template"}])
    decision = ENGINE.evaluate(copy.deepcopy(obj), RequestContext(namespace="ml"))
    assert not decision.allowed and decision.error and "draResources" in decision.error
    opened = Engine(parse_config_text("kind: GpuguardConfig\nfailureMode: open\n"))
    assert opened.evaluate(copy.deepcopy(obj), RequestContext(namespace="ml")).allowed


def test_nim_pods_reads_user_input_defensively():
    assert nim_pods({"replicas": "2", "multiNode": {"parallelism": {"pipeline": "x"}}}) == 1
    assert nim_pods({"scale": {"enabled": True, "hpa": None}}) == 1


# ---------------------------------------------------------------- vLLM production-stack


def test_vllmruntime_counts_the_deployment_shorthand_and_autoscaling():
    assert gpus(vllm({"gpu": "1", "cpu": "8", "memory": "32Gi"}, replicas=3)) == 3
    assert gpus(vllm({"gpu": "2", "gpuType": "amd.com/gpu", "memory": "32Gi"}, replicas=1)) == 2
    scaled = vllm({"gpu": "1", "memory": "32Gi"}, autoscalingConfig={"enabled": True, "maxReplicas": 6})
    assert gpus(scaled) == 6
    assert runtime_pods({"deploymentConfig": {"replicas": -1}}) == 1


def test_vllmruntime_memory_is_request_and_limit_and_defaults_go_into_its_resources():
    # the operator writes the item as requests and limits: a memory set there is a limit
    assert only("gpu-memory-guard").evaluate(vllm({"gpu": "1", "memory": "32Gi"})).allowed
    decision = evaluate_twice(only("default-resources"), vllm({"gpu": "1"}))
    resources = decision.mutated["spec"]["deploymentConfig"]["resources"]
    assert resources["cpu"] and resources["memory"] and set(resources) == {"gpu", "cpu", "memory"}
    over = ENGINE.evaluate(vllm({"gpu": "8", "memory": "512Gi"}, replicas=9), RequestContext(namespace="ml"))
    assert not over.allowed and over.gpus == 72


# ---------------------------------------------------------------- AIBrix


def _role(name: str, replicas: int, resources: dict, group: int | None = None) -> dict:
    role: dict = {"name": name, "replicas": replicas, "stateful": True,
                  "template": {"metadata": {"labels": {"role": name}},
                               "spec": {"containers": [{"name": name, "image": "vllm/vllm-openai:v0.9.1",
                                                        "resources": {"limits": resources}}]}}}
    if group is not None:
        role["podGroupSize"] = group
    return role


def test_stormservice_counts_roles_groups_and_role_sets_with_gpus_and_neuron():
    roles = [_role("prefill", 2, {"nvidia.com/gpu": 1, "memory": "64Gi"}, group=2),
             _role("decode", 1, {"aws.amazon.com/neuron": 4, "memory": "64Gi"}),
             _role("routing", 1, {"memory": "1Gi"})]
    storm = {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService", "metadata": dict(META),
             "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llm"}},
                      "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"roles": roles}}}}
    decision = ENGINE.evaluate(copy.deepcopy(storm), RequestContext(namespace="ml"))
    assert decision.gpus == 2 * (2 * 2 * 1 + 1 * 4)
    roleset = {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet", "metadata": dict(META),
               "spec": {"roles": copy.deepcopy(roles)}}
    assert gpus(roleset) == 2 * 2 + 4
    podset = {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet", "metadata": dict(META),
              "spec": {"podGroupSize": 4, "template": copy.deepcopy(roles[0]["template"])}}
    assert gpus(podset) == 4


# ---------------------------------------------------------------- KubeAI


def model(profile: str, **spec) -> dict:
    return {"apiVersion": "kubeai.org/v1", "kind": "Model", "metadata": dict(META),
            "spec": {"url": "hf://meta-llama/Llama-3.1-8B-Instruct", "engine": "VLLM", "features": ["TextGeneration"],
                     "resourceProfile": profile, **spec}}


@pytest.mark.parametrize(("profile", "spec", "expected"), [
    ("nvidia-gpu-l4:2", {}, 2),
    ("nvidia-gpu-l4:2", {"minReplicas": 1, "maxReplicas": 4}, 8),  # the autoscaler's maximum
    ("nvidia-gpu-h100:8", {"replicas": 3}, 24),
    ("nvidia-gpu-l4", {}, 1),  # a name without a count is one of it
    ("cpu:4", {}, 0),
])
def test_kubeai_model_gpus_come_from_the_chart_profiles_times_the_count(profile, spec, expected):
    assert gpus(model(profile, **spec)) == expected


def test_kubeai_profile_resources_and_pod_fields_are_what_the_pods_get():
    decision = only("gpu-memory-guard").evaluate(model("nvidia-gpu-l4:2"))
    # the chart's L4 profile asks 6 CPU and 24Gi per GPU with no memory limit: denied, naming the profile to fix
    assert not decision.allowed
    assert "KubeAI resource profile nvidia-gpu-l4" in decision.denials[0].message + decision.denials[0].fix
    # the profile's toleration is the pods': gpuguard sees it, and nothing of the profile lands in the Model
    kept = evaluate_twice(only("priority-class"), model("nvidia-gpu-l4:1"))
    assert "tolerations" not in kept.mutated["spec"] and kept.mutated["spec"]["priorityClassName"]


def test_kubeai_profiles_from_the_config_are_merged_over_the_chart_and_unknown_ones_refused():
    config = ("kind: GpuguardConfig\nkubeai:\n  resourceProfiles:\n"
              "    nvidia-gpu-l4:\n      limits: {memory: 32Gi}\n"
              "    amd-gpu-mi300x:\n      limits: {amd.com/gpu: '1', memory: 192Gi}\n"
              "    nvidia-gpu-t4: null\n")
    engine = Engine(parse_config_text(config))
    guard = Engine(parse_config_text(config + "policies:\n" + "".join(
        f"  {p}: {{action: off}}\n" for p in ("checkpoint-volume", "ephemeral-storage", "workload-class",
                                              "gpu-request-shape", "schedulable", "gang-scheduling"))))
    l4 = guard.evaluate(model("nvidia-gpu-l4:2"), RequestContext(namespace="ml"))
    assert l4.allowed and l4.gpus == 2  # the memory limit the admin added (x2) satisfies gpu-memory-guard
    amd = engine.evaluate(model("amd-gpu-mi300x:8", replicas=9), RequestContext(namespace="ml"))
    assert amd.gpus_by_resource == {"amd.com/gpu": 72} and not amd.allowed
    for unknown in ("nvidia-gpu-t4:1", "my-gpu:1", "nvidia-gpu-l4:two"):
        refused = engine.evaluate(model(unknown), RequestContext(namespace="ml"))
        assert not refused.allowed and refused.error and "resourceProfile" in refused.error, unknown
    opened = Engine(parse_config_text(config + "failureMode: open\n"))
    assert opened.evaluate(model("my-gpu:1"), RequestContext(namespace="ml")).allowed
