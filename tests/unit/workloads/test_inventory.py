"""The node inventory: nodes summarised into groups, pools, and the label learned for an accelerator."""

from __future__ import annotations

from decimal import Decimal

from gpuguard.workloads.inventory import Taint, declared_pool, from_objects, summarise_nodes


def node(name: str, labels: dict, alloc: dict, taints: list | None = None, **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
            **labels}}, "spec": {"taints": taints or [], **spec}, "status": {"allocatable": alloc}}


L4 = {"cloud.google.com/gke-accelerator": "nvidia-l4", "node.kubernetes.io/instance-type": "g2-standard-24"}
L4_ALLOC = {"cpu": "23830m", "memory": "87Gi", "nvidia.com/gpu": "2"}
GKE_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_nodes_of_one_shape_are_one_group_with_the_labels_all_of_them_carry():
    groups, total = summarise_nodes([
        node("a", {**L4, "topology.kubernetes.io/zone": "a"}, L4_ALLOC, GKE_TAINT),
        node("b", {**L4, "topology.kubernetes.io/zone": "b"}, {**L4_ALLOC, "memory": "86Gi"}, GKE_TAINT),
        node("cordoned", L4, L4_ALLOC, GKE_TAINT, unschedulable=True),
        node("cpu", {"node.kubernetes.io/instance-type": "e2-standard-8"}, {"cpu": "8", "memory": "30Gi"}),
    ])
    # A cordoned node is its own group, marked: it hosts nothing now, but it comes back ("not now", not "never").
    assert total == 4 and len(groups) == 3
    l4 = next(g for g in groups if g.name == "nvidia-l4" and not g.cordoned)
    assert l4.count == 2
    cordoned = next(g for g in groups if g.cordoned)
    assert cordoned.count == 1 and cordoned.describe() == "nvidia-l4, 1 cordoned node"
    assert "topology.kubernetes.io/zone" not in l4.labels and "kubernetes.io/hostname" not in l4.labels
    assert l4.allocatable["memory"] == 87 * 2**30 and l4.smallest["memory"] == 86 * 2**30
    assert l4.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert l4.describe() == "nvidia-l4, 2 nodes"


def test_the_learned_label_is_one_only_the_accelerator_nodes_carry():
    inv = from_objects([node("cpu", {"cloud.google.com/gke-nodepool": "default"}, {"cpu": "8"}),
                        node("l4", {**L4, "cloud.google.com/gke-nodepool": "l4"}, L4_ALLOC, GKE_TAINT)])
    assert inv.known
    assert inv.selection_for(["nvidia.com/gpu"]) == {"key": "cloud.google.com/gke-accelerator", "operator": "In",
                                                     "values": ["nvidia-l4"]}
    # a resource no node offers: nothing to learn
    assert inv.selection_for(["amd.com/gpu"]) is None


def test_no_label_when_nothing_tells_the_accelerator_nodes_apart():
    same = {"pool": "shared"}
    inv = from_objects([node("cpu", same, {"cpu": "8"}), node("gpu", same, {"cpu": "8", "nvidia.com/gpu": "1"})])
    assert inv.selection_for(["nvidia.com/gpu"]) is None


def test_a_list_and_a_karpenter_nodepool_are_read():
    nodepool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {
        "template": {"spec": {"requirements": [
            {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a10g", "l4"]},
            {"key": "karpenter.sh/capacity-type", "operator": "Exists"}],
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
        "limits": {"nvidia.com/gpu": "16"}}}
    inv = from_objects([{"apiVersion": "v1", "kind": "List", "items": [node("cpu", {}, {"cpu": "4"})]}, nodepool])
    pool = next(g for g in inv.groups if g.source == "karpenter")
    assert inv.nodes == 1 and pool.offers("nvidia.com/gpu") and not pool.offers("amd.com/gpu")
    assert pool.amount("nvidia.com/gpu") is None  # a Karpenter pool's node shape is unknown
    assert pool.labels["karpenter.k8s.aws/instance-gpu-name"] == frozenset({"a10g", "l4"})
    assert pool.matches({"anything.example.com/x": "y"}, None)  # open labels: the instance type adds its own
    assert not pool.matches({"karpenter.k8s.aws/instance-gpu-name": "h100"}, None)


def test_declared_pool_and_taints():
    pool = declared_pool("l4-pool", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, GKE_TAINT,
                         {"cpu": "23", "memory": "87Gi", "nvidia.com/gpu": "2"}, 4)
    assert pool.amount("nvidia.com/gpu") == Decimal(2) and pool.describe() == "pool l4-pool, up to 4 nodes"
    assert pool.untolerated([]) == [Taint("nvidia.com/gpu", "present", "NoSchedule")]
    assert pool.untolerated([{"key": "nvidia.com/gpu", "operator": "Exists"}]) == []
    assert pool.untolerated([{"operator": "Exists"}]) == []
    assert pool.untolerated([{"key": "nvidia.com/gpu", "value": "other", "effect": "NoSchedule"}])
    assert not pool.matches(None, [{"matchExpressions": [
        {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-h100-80gb"]}]}])
    assert not pool.matches(None, [{}])  # an empty term matches no node


def _dra_node(name: str, **allocatable: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", **allocatable}}}


def _slice(node: str, driver: str, devices: int) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-{driver}"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1},
                     "devices": [{"name": f"d{i}"} for i in range(devices)]}}


def _mapping_class(name: str, driver: str, resource: str | None) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}
    if resource:
        spec["extendedResourceName"] = resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def test_resource_slices_count_as_the_extended_resource_their_device_class_maps() -> None:
    """DRA extended resources: a node whose driver publishes devices in several slices offers their sum under the
    mapped name; a node advertising the name itself keeps its own count; an unmapped driver adds nothing."""
    from gpuguard.workloads.inventory import from_objects

    objects = [_dra_node("a"), _dra_node("b", **{"amd.com/gpu": "4"}), _dra_node("c"),
               _slice("a", "gpu.example.com", 4), _slice("a", "gpu.example.com", 4),
               _slice("b", "gpu.amd.com", 8), _slice("c", "fpga.example.com", 2),
               _mapping_class("example-gpu", "gpu.example.com", "example.com/gpu"),
               _mapping_class("amd-gpu", "gpu.amd.com", "amd.com/gpu"),
               _mapping_class("fpga", "fpga.example.com", None)]
    offered = [{k: int(v) for k, v in g.allocatable.items() if "/" in k} for g in from_objects(objects).groups]
    assert sorted(offered, key=str) == sorted([
        {"example.com/gpu": 8},  # a: two slices of 4
        {"amd.com/gpu": 4},  # b advertises its own 4: the slices don't replace it
        {}], key=str)  # c: its class maps no extended resource


def _device_class(name: str, *expressions: str, extended: str | None = None) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def test_a_device_class_requires_only_what_a_conjunction_of_its_selectors_says_exactly():
    from gpuguard.workloads.inventory import device_class

    plain = device_class(_device_class("x", "device.driver == 'accel.example.dev'"))
    typed = device_class(_device_class(
        "y", 'device.driver == "accel.example.dev" && device.attributes["accel.example.dev"].type == "npu"',
        "device.capacity['accel.example.dev'].memory.compareTo(quantity('64Gi')) >= 0"))
    either = device_class(_device_class(
        "z", "device.driver == 'accel.example.dev' && (device.attributes['accel.example.dev'].type == 'npu' || "
        "device.attributes['accel.example.dev'].type == 'vnpu')"))
    assert plain is not None and typed is not None and either is not None
    assert plain.requires == () and plain.min_memory is None
    assert typed.requires == (("type", "npu"),) and typed.min_memory == Decimal(64 * 2**30)
    assert typed.requirements() == 'type == "npu", memory >= 64Gi'
    assert either.requires == ()  # a disjunction lets other devices in: nothing is required
    # Another domain's attribute is not one the driver's devices publish as theirs: it only narrows.
    foreign = device_class(_device_class(
        "w", "device.driver == 'accel.example.dev' && device.attributes['topology.example.org'].type == 'rack-a'"))
    assert foreign is not None and foreign.requires == ()
    # Unknown conditions only narrow: a device without the attribute or its memory may still be one (upper bound).
    assert typed.selects(("accel.example.dev", None, None), None)
    assert not typed.selects(("accel.example.dev", "vnpu", None), None)
    assert not typed.selects(("accel.example.dev", "npu", None), Decimal(32 * 2**30))
    assert not typed.selects(("other.example.dev", "npu", None), None)


def test_slices_are_read_in_every_served_shape_and_counted_per_kind_of_device():
    from gpuguard.workloads.inventory import slice_devices

    def device(name: str, kind: str, memory: str, qualified: bool = False, basic: bool = False) -> dict:
        prefix = "accel.example.dev/" if qualified else ""
        body = {"attributes": {f"{prefix}type": {"string": kind}, f"{prefix}productName": {"string": "Example X1"},
                               "uuid": {"string": f"uuid-{name}"}},
                "capacity": {f"{prefix}memory": {"value": memory}}}
        return {"name": name, "basic": body} if basic else {"name": name, **body}

    def slice_(name: str, version: str, devices: list) -> dict:
        return {"apiVersion": f"resource.k8s.io/{version}", "kind": "ResourceSlice", "metadata": {"name": name},
                "spec": {"driver": "accel.example.dev", "nodeName": "n1", "pool": {"name": "n1"}, "devices": devices}}

    other_domain = {"name": "d9", "attributes": {"vendor.example.org/type": {"string": "npu"}}}
    published = slice_devices([
        slice_("a", "v1", [device("d0", "npu", "64Gi"), device("d1", "npu", "48Gi", qualified=True)]),
        slice_("c", "v1", [other_domain]),
        slice_("b", "v1beta1", [device("d2", "npu", "64Gi", basic=True), device("p0", "partition", "8Gi", basic=True)]),
    ])["n1"]
    whole, part = ("accel.example.dev", "npu", "Example X1"), ("accel.example.dev", "partition", "Example X1")
    # a per-device uuid does not make every device its own kind; another domain's ``type`` is not the device's
    assert published.counts == {whole: 3, part: 1, ("accel.example.dev", None, None): 1}
    assert published.memory == {whole: Decimal(48 * 2**30), part: Decimal(8 * 2**30)}
    assert published.product == "Example-X1"  # spelled as a product label value is
