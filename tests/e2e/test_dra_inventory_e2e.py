"""DRA as inventory behind a real kube-apiserver (v1.33, ``resource.k8s.io`` on): the devices ResourceSlices publish.

The nodes here have no GPU in their allocatable (no device plugin runs): a DRA driver gpuguard has never heard of
(``gpu.example.com``) publishes their devices in ResourceSlices, 4 on one node and 2 + 2 (two slices) on the other,
and a DeviceClass selects that driver.  gpuguard serves with ``--node-inventory --dra-claims`` as its own
ServiceAccount with the RBAC of ``deploy/base`` (so the ``list``/``watch`` on ``resourceslices`` is proven), and
pods are applied as the ordinary user ``alice``: a pod claiming more devices than any node's slices publish is
denied naming the most there is; one that fits is admitted; a slice the driver adds later lets the larger claim
through within seconds (the watch, no restart), and ``audit --cluster`` reads the same slices.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer, gpuguard, server_identity

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
USER = "alice"
GATES = {"DynamicResourceAllocation": True}
RUNTIME_CONFIG = ["resource.k8s.io/v1beta1=true", "resource.k8s.io/v1beta2=true"]
DRIVER = "gpu.example.com"
DRA = "resource.k8s.io/v1beta1"


def _node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "example.com/rack": "r7"}}}


def _slice(node: str, part: int, devices: int) -> dict:
    return {"apiVersion": DRA, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{part}"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1,
                                                                  "resourceSliceCount": 2},
                     "devices": [{"name": f"accel-{part}-{d}", "basic": {"attributes": {
                         "model": {"string": "X-9"}}}} for d in range(devices)]}}


def _template(ns: str, name: str, count: int) -> dict:
    return {"apiVersion": DRA, "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "accels", "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": count}]}}}}


def _pod(ns: str, name: str, template: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"restartPolicy": "Never",
                     "resourceClaims": [{"name": "accels", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "main", "image": "registry.example/x9/serve:2",
                                     "command": ["x9-serve", "--model", "/models/m"],
                                     "resources": {"claims": [{"name": "accels"}], "limits": {
                                         "cpu": "16", "memory": "128Gi", "ephemeral-storage": "50Gi"}}}]}}


def _apply(cp: ControlPlane, obj: dict, *extra: str, user: str | None = USER):
    who = (f"--as={user}",) if user else ()
    return cp.kubectl(*who, "apply", *extra, "-f", "-", input=yaml.safe_dump(obj), check=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[tuple[ControlPlane, str]]:
    require_control_plane()
    workdir = tmp_path_factory.mktemp("gpuguard-dra-inventory")
    with ControlPlane(feature_gates=GATES, runtime_config=RUNTIME_CONFIG) as cp:
        for name in ("dra-0", "dra-1"):
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_node(name)))
            allocatable = {"cpu": "96", "memory": "768Gi", "pods": "110"}
            cp.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                       "-p", json.dumps({"status": {"capacity": allocatable, "allocatable": allocatable}}))
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": DRA, "kind": "DeviceClass", "metadata": {"name": DRIVER},
             "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}))
        for obj in (_slice("dra-0", 0, 4), _slice("dra-1", 0, 2), _slice("dra-1", 1, 2)):
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
        cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
        ns = f"dra-{uuid.uuid4().hex[:8]}"
        cp.kubectl("create", "namespace", ns)
        cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
        for name, count in (("four", 4), ("six", 6)):
            cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_template(ns, name, count)))
        # Bare pods are training work; these tests are about devices, not checkpoints.
        config = DEFAULT_CONFIG.read_text().replace("  checkpoint-volume:\n    action: enforce",
                                                    "  checkpoint-volume:\n    action: \"off\"")
        assert "action: \"off\"" in config
        server = GpuguardServer(workdir, config, kubeconfig=server_identity(cp, workdir),
                                extra_args=("--node-inventory", "--dra-claims", "--nodepool-refresh", "2"))
        server.start()
        try:
            server.register(cp)

            last: list[str] = []

            def in_force() -> bool:
                result = _apply(cp, _pod(ns, "probe", "six"), "--dry-run=server")
                last[:] = [result.stderr or result.stdout]
                return result.returncode != 0 and "[schedulable]" in result.stderr

            try:
                cp.wait_for(in_force, timeout=60, interval=1, message="gpuguard in force with the slices")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}\nthe last answer: {last}") from None
            yield cp, ns
        finally:
            server.stop()
            print(f"\n[e2e] gpuguard log: {server.log}")


def test_a_claim_no_nodes_slices_can_hold_is_denied_and_one_that_fits_admitted(cluster) -> None:
    cp, ns = cluster
    denied = _apply(cp, _pod(ns, "six", "six"))
    assert denied.returncode != 0
    assert f"claims 6 devices of DeviceClass {DRIVER} per pod (DRA); the most any node's ResourceSlices " \
           "publish is 4" in denied.stderr, denied.stderr
    assert "claim at most 4 per pod" in denied.stderr
    admitted = _apply(cp, _pod(ns, "four", "four"))  # dra-1's two slices of 2 add up as well as dra-0's one
    assert admitted.returncode == 0, admitted.stderr


def test_a_slice_the_driver_adds_is_seen_without_a_restart_and_the_audit_reads_the_slices(cluster) -> None:
    cp, ns = cluster
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_slice("dra-0", 1, 2)))  # dra-0 now publishes 6
    last: list[str] = []

    def admitted() -> bool:
        result = _apply(cp, _pod(ns, "six-later", "six"))
        last[:] = [result.stderr]
        return result.returncode == 0

    cp.wait_for(admitted, timeout=30, interval=0.5, message=f"the 6-device claim admitted once dra-0 has 6: {last}")
    cp.kubectl("delete", "resourceslice", "dra-0-1")  # withdrawn: the stored pod can't be placed any more
    audit = gpuguard("audit", "--cluster", "-n", ns, "--kubeconfig", str(cp.kubeconfig), "--format", "json",
                     "--fail-on", "never", check=False)
    results = {r["name"]: r for r in json.loads(audit.stdout)["results"] if r["kind"] == "Pod"}
    assert [v["policy"] for v in results["six-later"]["violations"] if v["policy"] == "schedulable"] == \
        ["schedulable"], results["six-later"]
    assert not [v for v in results["four"]["violations"] if v["policy"] == "schedulable"]


NPU = "npu.example.org"


def _typed_slice(node: str) -> dict:
    """One board's slice: 2 whole NPUs and their 8 partitions, one driver, told apart by the ``type`` attribute
    (qualified with the driver's domain on the partitions), each with its memory."""
    whole = [{"name": f"npu-{i}", "basic": {"attributes": {"type": {"string": "whole"}},
                                            "capacity": {"memory": {"value": "96Gi"}}}} for i in range(2)]
    parts = [{"name": f"npu-{i // 4}-part-{i % 4}", "basic": {
        "attributes": {f"{NPU}/type": {"string": "partition"}}, "capacity": {"memory": {"value": "24Gi"}}}}
        for i in range(8)]
    return {"apiVersion": DRA, "kind": "ResourceSlice", "metadata": {"name": f"{node}-{NPU}"},
            "spec": {"driver": NPU, "nodeName": node, "pool": {"name": f"{node}-npu", "generation": 1,
                                                               "resourceSliceCount": 1}, "devices": whole + parts}}


def _typed_class(name: str, device_type: str) -> dict:
    return {"apiVersion": DRA, "kind": "DeviceClass", "metadata": {"name": name}, "spec": {"selectors": [
        {"cel": {"expression": f"device.driver == '{NPU}' && device.attributes['{NPU}'].type == '{device_type}'"}}]}}


def _typed_template(ns: str, name: str, device_class: str, count: int) -> dict:
    template = _template(ns, name, count)
    template["spec"]["spec"]["devices"]["requests"][0]["deviceClassName"] = device_class
    return template


def test_devices_of_one_driver_count_for_the_class_whose_type_they_have(cluster) -> None:
    """The slice's attributes as the apiserver stores them (v1beta1, under ``basic``) reach the watch: a claim of 4
    whole NPUs is denied where the node publishes 2 whole and 8 partitions of one driver (not 10), and a claim of 8
    partitions is admitted."""
    cp, ns = cluster
    for obj in (_typed_class("whole.npu.example.org", "whole"), _typed_class("part.npu.example.org", "partition"),
                _typed_slice("dra-1")):
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    for name, device_class, count in (("whole-4", "whole.npu.example.org", 4), ("part-8", "part.npu.example.org", 8)):
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_typed_template(ns, name, device_class, count)))
    last: list[str] = []

    def whole_denied() -> bool:
        result = _apply(cp, _pod(ns, "npu-whole", "whole-4"), "--dry-run=server")
        last[:] = [result.stderr]
        return result.returncode != 0 and "whole.npu.example.org" in result.stderr

    cp.wait_for(whole_denied, timeout=30, interval=0.5, message=f"the whole-NPU claim judged on the slice: {last}")
    assert "the most any node's ResourceSlices publish that the class selects (type == \"whole\") is 2" in last[0]
    admitted = _apply(cp, _pod(ns, "npu-parts", "part-8"))
    assert admitted.returncode == 0, admitted.stderr
