"""Accelerators learned, not listed: the shipped vendor profiles offline, what the nodes advertise and what the
cluster's DRA DeviceClasses declare (docs/accelerators.md, "Accelerators learned from the cluster")."""

from __future__ import annotations

import pytest

from gpuguard.webhook.config import load_config, parse_config_text, with_learned_accelerators
from gpuguard.webhook.engine.core import Engine
from gpuguard.workloads.accelerators import may_be_accelerator
from gpuguard.workloads.claims import StaticClaims
from gpuguard.workloads.inventory import EMPTY_INVENTORY, from_objects

CONFIG = load_config()


def node(name: str, allocatable: dict, taints: list | None = None, labels: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints or []},
            "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "ephemeral-storage": "1Ti", **allocatable}}}


def device_class(name: str, extended: str | None = None, version: str = "v1") -> dict:
    spec = {"selectors": [{"cel": {"expression": f'device.driver == "{name}"'}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": spec}


NPU_NODES = [
    node("npu-1", {"acme.ai/npu": "8", "rdma/hca_shared_devices_a": "1000", "smarter-devices/fuse": "20",
                   "vpc.amazonaws.com/pod-eni": "9"},
         taints=[{"key": "acme.ai/npu", "value": "present", "effect": "NoSchedule"}],
         labels={"node.kubernetes.io/instance-type": "acme-npu-8x"}),
    node("cpu-1", {}, labels={"node.kubernetes.io/instance-type": "m5.4xlarge"}),
]


def job(limits: dict, **spec) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", **spec, "containers": [
                {"name": "trainer", "image": "ghcr.io/example/trainer:1", "command": ["python", "train.py"],
                 "resources": {"limits": limits}}]}}}}


def policies(decision) -> set[tuple[str, str]]:
    return {(v.policy, v.verdict) for v in decision.violations}


# ---------------------------------------------------------------- the one rule
@pytest.mark.parametrize("name", ["nvidia.com/gpu", "acme.ai/npu", "huawei.com/Ascend910", "example.com/npu",
                                  "gpu.intel.com/xe", "aws.amazon.com/neuron"])
def test_vendor_domain_resources_may_be_accelerators(name):
    assert may_be_accelerator(name)


@pytest.mark.parametrize("name", [
    "cpu", "memory", "hugepages-2Mi", "rdma/hca_shared_devices_a", "nvidia.com/rdma_shared_device_a",
    "intel.com/intel_sriov_netdevice", "openshift.io/mlxnics", "vpc.amazonaws.com/pod-eni", "vpc.amazonaws.com/efa",
    "smarter-devices/fuse", "squat.ai/fuse", "github.com/fuse", "devices.kubevirt.io/kvm", "sgx.intel.com/epc",
    "intel.com/sgx", "qat.intel.com/generic", "gpu.intel.com/millicores", "example/gpu", "kubernetes.io/foo",
    "node.kubernetes.io/x", "acme.ai/"])
def test_networking_host_devices_offload_engines_and_native_names_are_not(name):
    assert not may_be_accelerator(name)


# ---------------------------------------------------------------- shipped vendor profiles (offline)
@pytest.mark.parametrize(("resource", "profile"), [
    ("huawei.com/Ascend910", "ascend-npu"), ("huawei.com/Ascend910B3", "ascend-npu"),
    ("huawei.com/Ascend310P", "ascend-npu"), ("huawei.com/Ascend910-4c", "ascend-npu"),
    ("huawei.com/npu", "ascend-npu"), ("cambricon.com/mlu", "cambricon-mlu"), ("cambricon.com/mlu370", "cambricon-mlu"),
    ("cambricon.com/vmlu", "cambricon-mlu"), ("hygon.com/dcu", "hygon-dcu"), ("hygon.com/dcunum", "hygon-dcu"),
    ("metax-tech.com/gpu", "metax-gpu"), ("mthreads.com/vgpu", "mthreads-gpu"), ("iluvatar.ai/gpu", "iluvatar-gpu"),
    ("enflame.com/gcu", "enflame-gcu"), ("kunlunxin.com/xpu", "kunlunxin-xpu"),
])
def test_shipped_vendor_profiles_count_offline(resource, profile):
    assert CONFIG.accelerators.profile_for(resource).name == profile
    decision = Engine(CONFIG).evaluate(job({resource: 8}))
    assert decision.gpus == 8 and ("checkpoint-volume", "deny") in policies(decision)


@pytest.mark.parametrize("companion", ["huawei.com/Ascend910B-memory", "cambricon.com/mlu.smlu.vmemory",
                                       "cambricon.com/mlu370.smlu.vcore", "hygon.com/dcumem", "hygon.com/dcucores"])
def test_a_shared_devices_memory_and_cores_are_not_devices(companion):
    assert not CONFIG.accelerators.is_accelerator(companion)
    decision = Engine(CONFIG).evaluate(job({"huawei.com/Ascend910B": 1, companion: 3000}))
    assert decision.gpus == 1  # the device, not 3001


def test_vendor_profiles_are_never_sized_or_placed():
    profile = CONFIG.accelerators.by_name["ascend-npu"]
    assert profile.sizing_mode == "none" and profile.node_selection is None and profile.tolerations == []
    decision = Engine(CONFIG).evaluate(job({"huawei.com/Ascend910": 8}))
    container = decision.mutated["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": 8}}
    assert "affinity" not in decision.mutated["spec"]["template"]["spec"]


# ---------------------------------------------------------------- learned from nodes
def test_a_resource_no_profile_lists_is_learned_from_the_nodes():
    engine = Engine(CONFIG, nodes=from_objects(NPU_NODES))
    decision = engine.evaluate(job({"acme.ai/npu": 4}))
    assert decision.gpus == 4 and decision.gpus_by_resource == {"acme.ai/npu": 4}
    assert ("checkpoint-volume", "deny") in policies(decision)
    spec = decision.mutated["spec"]["template"]["spec"]
    # the toleration of the taint keyed by the resource's name; no sizing (never a guess)
    assert spec["tolerations"] == [{"key": "acme.ai/npu", "operator": "Exists", "effect": "NoSchedule"}]
    assert set(spec["containers"][0]["resources"]["limits"]) == {"acme.ai/npu"}
    assert "resources" not in spec or not spec.get("resources")
    learned = engine.config.accelerators.profile_for("acme.ai/npu")
    assert learned.name == "learned:acme.ai/npu" and learned.sizing_mode == "none"
    assert learned.node_selection is None and learned.max_per_node is None


def test_the_learned_resource_is_capped_by_the_nodes():
    decision = Engine(CONFIG, nodes=from_objects(NPU_NODES)).evaluate(job({"acme.ai/npu": 16}))
    assert ("schedulable", "deny") in policies(decision)


def test_without_nodes_an_unknown_vendor_resource_is_not_counted():
    decision = Engine(CONFIG).evaluate(job({"acme.ai/npu": 4}))
    assert decision.allowed and decision.gpus == 0
    assert CONFIG.accelerators.unknown_resources(["acme.ai/npu", "cpu", "rdma/hca", "nvidia.com/gpu"]) == [
        "acme.ai/npu"]


def test_nics_fuse_and_pod_enis_are_never_learned():
    engine = Engine(CONFIG, nodes=from_objects(NPU_NODES))
    for name in ("rdma/hca_shared_devices_a", "smarter-devices/fuse", "vpc.amazonaws.com/pod-eni"):
        assert not engine.config.accelerators.is_accelerator(name)
        assert engine.evaluate(job({name: 1})).gpus == 0
    nic_only = from_objects([node("nic", {"rdma/hca_shared_devices_a": "1000", "vpc.amazonaws.com/pod-eni": "9"})])
    assert not nic_only.known  # no accelerator node: the profiles stay the fallback


def test_a_profiles_companion_is_never_learned():
    hami = from_objects([node("hami", {"nvidia.com/gpu": "8", "nvidia.com/gpucores": "800",
                                       "nvidia.com/gpumem": "80000"})])
    accelerators = Engine(CONFIG, nodes=hami).config.accelerators
    assert not accelerators.is_accelerator("nvidia.com/gpucores")
    assert not accelerators.is_accelerator("nvidia.com/gpumem")


def test_learning_can_be_switched_off_or_narrowed():
    off = parse_config_text("kind: GpuguardConfig\ninventory: {learnAccelerators: false}\n")
    assert Engine(off, nodes=from_objects(NPU_NODES)).evaluate(job({"acme.ai/npu": 4})).gpus == 0
    narrowed = parse_config_text("kind: GpuguardConfig\ninventory: {notAccelerators: ['acme.ai/*']}\n")
    assert Engine(narrowed, nodes=from_objects(NPU_NODES)).evaluate(job({"acme.ai/npu": 4})).gpus == 0


def test_declared_pools_teach_too():
    config = parse_config_text("kind: GpuguardConfig\ninventory:\n  nodePools:\n  - name: npu\n"
                               "    allocatable: {cpu: '64', memory: 512Gi, acme.ai/npu: '8'}\n")
    assert Engine(config).evaluate(job({"acme.ai/npu": 2})).gpus == 2


def test_learning_again_replaces_what_was_learned():
    engine = Engine(CONFIG, nodes=from_objects(NPU_NODES))
    assert engine.config.accelerators.is_accelerator("acme.ai/npu")
    other = Engine(engine.config)  # another engine of the same (learned) config, without nodes
    assert not other.config.accelerators.is_accelerator("acme.ai/npu")
    engine.set_nodes(EMPTY_INVENTORY)
    assert not engine.config.accelerators.is_accelerator("acme.ai/npu")
    assert with_learned_accelerators(CONFIG, EMPTY_INVENTORY) is CONFIG  # nothing learned: the same config


# ---------------------------------------------------------------- DRA DeviceClasses
def test_a_deviceclass_maps_an_extended_resource_to_its_profile():
    classes = from_objects([device_class("gpu.nvidia.com", "nvidia.com/gpu"),
                            device_class("npu.example.com", "example.com/npu", version="v1beta2")])
    accelerators = Engine(CONFIG, nodes=classes).config.accelerators
    # nvidia.com/gpu served by DRA: the class's profile (no node label: DRA places the pod)
    assert accelerators.profile_for("nvidia.com/gpu").name == "nvidia-gpu-dra"
    assert accelerators.profile_for("nvidia.com/gpu", ["nvidia.com/gpucores"]).name == "nvidia-gpu-dra"
    # a name no profile lists: a generic profile for the class, claims of the class count with it
    assert accelerators.profile_for("example.com/npu").name == "dra:npu.example.com"
    assert accelerators.for_device_class("npu.example.com").name == "dra:npu.example.com"
    decision = Engine(CONFIG, nodes=classes).evaluate(job({"example.com/npu": 2}))
    assert decision.gpus == 2 and ("checkpoint-volume", "deny") in policies(decision)


def test_a_deviceclass_mapping_a_profiled_resource_uses_the_resources_profile():
    accelerators = Engine(CONFIG, nodes=from_objects([device_class("ascend.example.com", "huawei.com/Ascend910")])
                          ).config.accelerators
    assert accelerators.profile_for("huawei.com/Ascend910").name == "ascend-npu"
    assert accelerators.for_device_class("ascend.example.com").name == "ascend-npu"


def claim_pod(device_class_name: str) -> tuple[dict, StaticClaims]:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "two", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "d", "exactly": {"deviceClassName": device_class_name, "count": 2}}]}}}}
    pod = job({})
    spec = pod["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "d", "resourceClaimTemplateName": "two"}]
    spec["containers"][0]["resources"] = {"claims": [{"name": "d"}]}
    return pod, StaticClaims([template])


def test_claims_of_a_deviceclass_no_profile_names_count_once_the_class_is_known():
    pod, claims = claim_pod("tpu.example.org")
    assert Engine(CONFIG, claims).evaluate(pod).gpus == 0  # offline: a class nothing names (a NIC, say)
    known = Engine(CONFIG, claims, from_objects([device_class("tpu.example.org")]))
    decision = known.evaluate(pod)
    assert decision.gpus == 2 and ("checkpoint-volume", "deny") in policies(decision)


@pytest.mark.parametrize("name", ["compute-domain-default-channel.nvidia.com", "rdma.mellanox.com", "dranet"])
def test_deviceclasses_of_nics_and_imex_channels_never_count(name):
    pod, claims = claim_pod(name)
    assert Engine(CONFIG, claims, from_objects([device_class(name)])).evaluate(pod).gpus == 0


def test_a_nic_deviceclass_serving_an_extended_resource_teaches_nothing():
    classes = from_objects([device_class("rdma.mellanox.com", "mellanox.com/rdma_vf"),
                            device_class("vf.example.com", "example.com/sriov_vf")])
    accelerators = Engine(CONFIG, nodes=classes).config.accelerators
    assert not accelerators.is_accelerator("mellanox.com/rdma_vf")
    assert not accelerators.is_accelerator("example.com/sriov_vf")
    assert accelerators is CONFIG.accelerators.base
