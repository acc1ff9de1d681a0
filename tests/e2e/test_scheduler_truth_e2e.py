"""What the real kube-scheduler does with what gpuguard admits, denies and mutates (issue 31).

Three cluster shapes — GKE (a3-highgpu-8g H100 and g2-standard-24 L4 pools, GKE's
``nvidia.com/gpu=present:NoSchedule`` taint), EKS with Karpenter (p5.48xlarge H100, g6.12xlarge L4) and
on-prem with NVIDIA's GPU Operator (A100 80GB, V100 and an A100 40GB node in MIG mixed mode) — each with a
CPU node and a system DaemonSet's pod on every node, are made one after the other as Ready Node objects
(no kubelet) that the real scheduler binds pods to.  gpuguard runs with the shipped default config and
``--node-inventory`` (it reads those Nodes).  Every case is applied as the ordinary user ``alice`` twice:
in a namespace gpuguard exempts (``sched-raw-*``: the unmutated workload) and in one where it is in force,
and the scheduler's verdicts are compared:

(a) nothing gpuguard admits pends where the unmutated workload is placed (its mutation is never the reason);
(b) nothing gpuguard denies as unschedulable is placed whole without it;
(c) an admitted gang (a Job with parallelism N and a Kueue queue label; no Kueue runs, so the default
    scheduler places it pod by pod) is placed whole or not at all;
(d) typed pods land on their type, and sizing strands no GPU: twenty 1-GPU replicas on mixed groups use as
    many GPUs of the H100 nodes as the unmutated run.

The per-shape figures (placed / pending / denied pods with and without gpuguard, GPUs left idle by
sizing) are printed at the end of the module.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import scheduling_control_plane  # noqa: F401  (pytest fixture)
from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, GpuguardServer

pytestmark = pytest.mark.e2e

USER = "alice"
GPU = "nvidia.com/gpu"
RAW = "sched-raw"  # namespaces gpuguard exempts (glob sched-raw-*): the unmutated run
GKE_TAINT = [{"key": GPU, "value": "present", "effect": "NoSchedule"}]
KARPENTER_TAINT = [{"key": GPU, "effect": "NoSchedule"}]  # the taint a Karpenter GPU NodePool is given


# --------------------------------------------------------------------------- cluster shapes


@dataclass(frozen=True)
class NodeShape:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)


def _gke() -> list[NodeShape]:
    def gpu(name: str, pool: str, accel: str, itype: str, alloc: dict[str, str]) -> NodeShape:
        return NodeShape(name, {"cloud.google.com/gke-nodepool": pool, "cloud.google.com/gke-accelerator": accel,
                                "node.kubernetes.io/instance-type": itype}, alloc, GKE_TAINT)

    # a3-highgpu-8g: 208 vCPU, 1872 GB, 8 H100 80GB, local SSDs as ephemeral storage;
    # g2-standard-24: 24 vCPU, 96 GB, 2 L4, a 100 GB boot disk (GKE leaves ~47Gi allocatable).
    h100 = {"cpu": "207", "memory": "1770Gi", "ephemeral-storage": "5500Gi", GPU: "8"}
    l4 = {"cpu": "23830m", "memory": "87Gi", "ephemeral-storage": "47Gi", GPU: "2"}
    return [
        NodeShape("gke-default-0", {"cloud.google.com/gke-nodepool": "default-pool",
                                    "node.kubernetes.io/instance-type": "e2-standard-8"},
                  {"cpu": "7910m", "memory": "29Gi", "ephemeral-storage": "47Gi"}),
        gpu("gke-h100-0", "h100-pool", "nvidia-h100-80gb", "a3-highgpu-8g", h100),
        gpu("gke-h100-1", "h100-pool", "nvidia-h100-80gb", "a3-highgpu-8g", h100),
        gpu("gke-l4-0", "l4-pool", "nvidia-l4", "g2-standard-24", l4),
        gpu("gke-l4-1", "l4-pool", "nvidia-l4", "g2-standard-24", l4),
    ]


def _eks() -> list[NodeShape]:
    def gpu(name: str, pool: str, gpu_name: str, itype: str, count: str, alloc: dict[str, str]) -> NodeShape:
        return NodeShape(name, {"karpenter.sh/nodepool": pool, "karpenter.k8s.aws/instance-gpu-name": gpu_name,
                                "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                                "karpenter.k8s.aws/instance-gpu-count": count,
                                "karpenter.k8s.aws/instance-family": itype.split(".")[0],
                                "node.kubernetes.io/instance-type": itype}, alloc, KARPENTER_TAINT)

    # p5.48xlarge: 192 vCPU, 2048 GiB, 8 H100, instance store in RAID0; g6.12xlarge: 48 vCPU, 192 GiB, 4 L4.
    return [
        NodeShape("ip-10-0-1-10", {"karpenter.sh/nodepool": "default",
                                   "node.kubernetes.io/instance-type": "m7i.2xlarge"},
                  {"cpu": "7910m", "memory": "29Gi", "ephemeral-storage": "18Gi"}),
        gpu("ip-10-0-2-20", "gpu-h100", "h100", "p5.48xlarge", "8",
            {"cpu": "191450m", "memory": "1960Gi", "ephemeral-storage": "27000Gi", GPU: "8"}),
        gpu("ip-10-0-3-30", "gpu-l4", "l4", "g6.12xlarge", "4",
            {"cpu": "47810m", "memory": "178Gi", "ephemeral-storage": "3300Gi", GPU: "4"}),
        gpu("ip-10-0-3-31", "gpu-l4", "l4", "g6.12xlarge", "4",
            {"cpu": "47810m", "memory": "178Gi", "ephemeral-storage": "3300Gi", GPU: "4"}),
    ]


def _onprem() -> list[NodeShape]:
    def operator(product: str, count: str, **extra: str) -> dict[str, str]:
        return {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": count,
                "feature.node.kubernetes.io/pci-10de.present": "true", **extra}

    a100 = {"cpu": "255", "memory": "1950Gi", "ephemeral-storage": "14000Gi", GPU: "8"}
    return [
        NodeShape("cpu-0", {"node-role.example.com/cpu": "true"},
                  {"cpu": "31500m", "memory": "120Gi", "ephemeral-storage": "400Gi"}),
        NodeShape("dgx-a100-80-0", operator("NVIDIA-A100-SXM4-80GB", "8", **{"nvidia.com/mig.strategy": "single"}),
                  a100),
        NodeShape("dgx-a100-80-1", operator("NVIDIA-A100-SXM4-80GB", "8", **{"nvidia.com/mig.strategy": "single"}),
                  a100),
        NodeShape("v100-0", operator("Tesla-V100-SXM2-32GB", "4"),
                  {"cpu": "47", "memory": "360Gi", "ephemeral-storage": "800Gi", GPU: "4"}),
        # MIG mixed, all-balanced on A100 40GB: per GPU 2x 1g.5gb, 1x 2g.10gb, 1x 3g.20gb; no whole GPU left.
        NodeShape("dgx-a100-40-mig-0", operator("NVIDIA-A100-SXM4-40GB", "8", **{
            "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.config": "all-balanced"}),
            {"cpu": "255", "memory": "950Gi", "ephemeral-storage": "14000Gi", GPU: "0",
             "nvidia.com/mig-1g.5gb": "16", "nvidia.com/mig-2g.10gb": "8", "nvidia.com/mig-3g.20gb": "8"}),
    ]


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # Pod | Job (a gang: parallelism = pods, Kueue label) | Deployment (pods = replicas)
    devices: dict[str, int]  # per pod
    pods: int = 1
    memory: str | None = None
    node_selector: dict[str, str] | None = None
    expect: str = "admit"  # or "deny" (by the schedulable policy)
    lands_on: tuple[str, str] | None = None  # (d): a label every placed pod's node carries
    same_gpus_on: str | None = None  # node-name prefix whose GPUs used must equal the unmutated run's


def _common(prefix: str) -> list[Case]:
    return [
        Case("single-gpu", "Pod", {GPU: 1}),
        Case("multi-gpu", "Pod", {GPU: 4}),
        Case("more-gpus-than-any-node", "Pod", {GPU: 16}, expect="deny"),
        Case("twenty-1-gpu-replicas", "Deployment", {GPU: 1}, pods=20, same_gpus_on=prefix),
    ]


SHAPES: dict[str, tuple[list[NodeShape], list[Case]]] = {
    "gke": (_gke(), [
        *_common("gke-h100"),
        Case("big-memory", "Pod", {GPU: 1}, memory="1000Gi",
             lands_on=("cloud.google.com/gke-accelerator", "nvidia-h100-80gb")),
        Case("memory-beyond-every-node", "Pod", {GPU: 1}, memory="4000Gi", expect="deny"),
        Case("typed-l4", "Pod", {GPU: 2}, node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
             lands_on=("cloud.google.com/gke-accelerator", "nvidia-l4")),
        Case("gang-fits-exactly", "Job", {GPU: 8}, pods=2),
        # 20 GPUs in 4-GPU pods = all 20 GPUs, but an L4 node holds no 4-GPU pod: 4 slots
        Case("gang-one-pod-too-many", "Job", {GPU: 4}, pods=5, expect="deny"),
    ]),
    "eks": (_eks(), [
        *_common("ip-10-0-2"),
        Case("big-memory", "Pod", {GPU: 1}, memory="1500Gi",
             lands_on=("karpenter.k8s.aws/instance-gpu-name", "h100")),
        Case("typed-h100", "Pod", {GPU: 1}, node_selector={"karpenter.k8s.aws/instance-gpu-name": "h100"},
             lands_on=("karpenter.k8s.aws/instance-gpu-name", "h100")),
        Case("typed-l4", "Pod", {GPU: 4}, node_selector={"karpenter.k8s.aws/instance-gpu-name": "l4"},
             lands_on=("karpenter.k8s.aws/instance-gpu-name", "l4")),
        Case("gang-fits-exactly", "Job", {GPU: 4}, pods=4),
        Case("gang-one-pod-too-many", "Job", {GPU: 4}, pods=5, expect="deny"),
    ]),
    "onprem": (_onprem(), [
        *_common("dgx-a100-80"),
        Case("big-memory", "Pod", {GPU: 1}, memory="1500Gi",
             lands_on=("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB")),
        Case("typed-a100-80gb", "Pod", {GPU: 2}, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
             lands_on=("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB")),
        Case("mig-1g", "Pod", {"nvidia.com/mig-1g.5gb": 1}, lands_on=("nvidia.com/mig.strategy", "mixed")),
        Case("mig-3g", "Pod", {"nvidia.com/mig-3g.20gb": 2}, lands_on=("nvidia.com/mig.strategy", "mixed")),
        Case("mig-7g-nobody-offers", "Pod", {"nvidia.com/mig-7g.40gb": 1}, expect="deny"),
        Case("gang-fits-exactly", "Job", {GPU: 8}, pods=2),
        Case("gang-one-pod-too-many", "Job", {GPU: 8}, pods=3, expect="deny"),
        Case("mig-gang-fits-exactly", "Job", {"nvidia.com/mig-1g.5gb": 1}, pods=16),
    ]),
}


def _container(case: Case) -> dict:
    limits: dict[str, object] = dict(case.devices)
    if case.memory:
        limits["memory"] = case.memory
    # an object-store checkpoint (checkpoint-volume: CHECKPOINT_URI) needs no PersistentVolume
    return {"name": "main", "image": "registry.example/ml/train:2026.11", "command": ["python", "train.py"],
            "env": [{"name": "CHECKPOINT_URI", "value": f"s3://ckpt/{case.name}"}],
            "resources": {"limits": limits}}


def _pod_spec(case: Case) -> dict:
    spec: dict = {"restartPolicy": "Never" if case.kind != "Deployment" else "Always",
                  "containers": [_container(case)]}
    if case.node_selector:
        spec["nodeSelector"] = dict(case.node_selector)
    return spec


def manifest(case: Case, ns: str) -> tuple[str, dict]:
    """The collection path and the object alice creates."""
    meta = {"name": case.name, "namespace": ns}
    if case.kind == "Pod":
        return f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                                 "spec": _pod_spec(case)}
    labels = {"app": case.name}
    template = {"metadata": {"labels": labels}, "spec": _pod_spec(case)}
    if case.kind == "Job":
        return f"/apis/batch/v1/namespaces/{ns}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {**meta, "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
            "spec": {"parallelism": case.pods, "completions": case.pods, "backoffLimit": 0, "template": template}}
    return f"/apis/apps/v1/namespaces/{ns}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": case.pods, "selector": {"matchLabels": labels}, "template": template}}


# --------------------------------------------------------------------------- the scheduler's verdicts


@dataclass
class Run:
    denied: str | None = None  # the denial's message
    placed: dict[str, str] = field(default_factory=dict)  # pod -> node
    pending: dict[str, str] = field(default_factory=dict)  # pod -> PodScheduled=False message
    devices: dict[str, int] = field(default_factory=dict)  # per pod, all accelerators
    requests: dict[str, str] = field(default_factory=dict)  # the first pod's container requests
    sized_from: str | None = None  # gpuguard.io/sized-from on that pod

    def gpus_on(self, prefix: str = "") -> int:
        return sum(sum(self.devices.values()) for node in self.placed.values() if node.startswith(prefix))

    def describe(self) -> str:
        if self.denied is not None:
            return "denied"
        return f"{len(self.placed)} placed, {len(self.pending)} pending"


def _verdicts(cp: ControlPlane, ns: str, pods: int, run: Run) -> tuple[dict[str, str], dict[str, str]] | None:
    _, listed = cp.request("GET", f"/api/v1/namespaces/{ns}/pods")
    items = listed.get("items") or []
    if len(items) < pods:
        return None
    run.requests = items[0]["spec"]["containers"][0].get("resources", {}).get("requests", {})
    run.sized_from = (items[0]["metadata"].get("annotations") or {}).get("gpuguard.io/sized-from")
    placed, pending = {}, {}
    for pod in items:
        name = pod["metadata"]["name"]
        if pod["spec"].get("nodeName"):
            placed[name] = pod["spec"]["nodeName"]
            continue
        unsched = [c for c in pod.get("status", {}).get("conditions") or []
                   if c.get("type") == "PodScheduled" and c.get("status") == "False"]
        if not unsched:
            return None  # the scheduler has not decided yet
        pending[name] = unsched[0].get("message", unsched[0].get("reason", ""))
    return placed, pending


def run_case(cp: ControlPlane, case: Case, ns: str) -> Run:
    path, obj = manifest(case, ns)
    status, body = cp.request("POST", path, obj, as_user=USER)
    if status >= 300:
        return Run(denied=(body or {}).get("message", str(body)) if isinstance(body, dict) else str(body))
    run = Run(devices=dict(case.devices))
    previous = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # settled: every pod decided, and the same twice in a row
        got = _verdicts(cp, ns, case.pods, run)
        if got is not None and got == previous:
            run.placed, run.pending = got
            return run
        previous = got
        time.sleep(0.7)
    raise AssertionError(f"{ns}/{case.name}: the scheduler did not decide every pod in 90 s: {previous}\n"
                         f"logs: {cp.logs_dir}")


def clean(cp: ControlPlane, ns: str) -> None:
    """Free the nodes for the next case: no kubelet confirms a deletion, so pods are deleted with grace 0
    after their controllers (orphaning, so nothing recreates them)."""
    for kind in ("apis/apps/v1/namespaces/{ns}/deployments", "apis/apps/v1/namespaces/{ns}/replicasets",
                 "apis/batch/v1/namespaces/{ns}/jobs"):
        cp.request("DELETE", "/" + kind.format(ns=ns), {"kind": "DeleteOptions", "apiVersion": "v1",
                                                          "propagationPolicy": "Orphan"})
    cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods",
               {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
    # a Job's pods carry its tracking finalizer until the job controller lets go of them
    for pod in cp.request("GET", f"/api/v1/namespaces/{ns}/pods")[1].get("items") or []:
        if pod["metadata"].get("finalizers"):
            cp.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                       {"metadata": {"finalizers": None}})
    cp.wait_for(lambda: not (cp.request("GET", f"/api/v1/namespaces/{ns}/pods")[1].get("items")), timeout=30,
                interval=0.3, message=f"pods of {ns} gone")


# --------------------------------------------------------------------------- the module's cluster


def _config() -> str:
    text = DEFAULT_CONFIG.read_text()
    marker = "namespaces: [kube-system, kube-node-lease, kube-public, gpuguard]"
    assert marker in text, "the default config's exemption line changed; update this test"
    return text.replace(marker, f"namespaces: [kube-system, kube-node-lease, kube-public, gpuguard, {RAW}-*]")


def namespace(cp: ControlPlane, prefix: str) -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cp.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
               check=True)
    cp.request("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "alice-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]}, check=True)
    return ns


# A node agent on every node (kube-system: exempt), so the nodes carry a system DaemonSet's overhead.
AGENT = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "node-agent", "namespace": "kube-system"},
         "spec": {"selector": {"matchLabels": {"app": "node-agent"}}, "template": {
             "metadata": {"labels": {"app": "node-agent"}},
             "spec": {"tolerations": [{"operator": "Exists"}], "priorityClassName": "system-node-critical",
                      "containers": [{"name": "agent", "image": "registry.example/node-agent:1", "resources": {
                          "requests": {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"}}}]}}}}


@dataclass
class Figures:
    rows: list[str] = field(default_factory=list)


FIGURES = Figures()


@pytest.fixture(scope="module")
def cluster(scheduling_control_plane, request) -> Iterator[ControlPlane]:  # noqa: F811
    cp = scheduling_control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.request("POST", "/apis/apps/v1/namespaces/kube-system/daemonsets", AGENT, check=True)
    t0 = time.monotonic()
    yield cp
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    lines = ["", f"[scheduler-truth] per shape, in pods (module {time.monotonic() - t0:.0f} s):", *FIGURES.rows]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)


@dataclass
class Shape:
    cp: ControlPlane
    name: str
    nodes: list[NodeShape]


_servers: list[GpuguardServer] = []


def use_shape(cp: ControlPlane, name: str, workdir) -> Shape:
    """Replace every Node by this shape's, then (re)start gpuguard so its inventory is only these nodes."""
    nodes, _ = SHAPES[name]
    cp.request("DELETE", "/api/v1/nodes", {"kind": "DeleteOptions", "apiVersion": "v1"})
    cp.wait_for(lambda: not cp.request("GET", "/api/v1/nodes")[1].get("items"), timeout=30, message="nodes gone")
    for node in nodes:
        cp.add_node(node.name, node.labels, node.allocatable, node.taints)

    def agents_placed() -> bool:
        _, pods = cp.request("GET", "/api/v1/namespaces/kube-system/pods?labelSelector=app%3Dnode-agent")
        on = {p["spec"].get("nodeName") for p in pods.get("items") or []}
        return all(n.name in on for n in nodes)

    cp.wait_for(agents_placed, timeout=60, interval=0.5, message="the node agent on every node")
    workdir.mkdir(parents=True, exist_ok=True)
    server = GpuguardServer(workdir, _config(), kubeconfig=cp.kubeconfig, extra_args=("--node-inventory",))
    server.start()
    server.register(cp)  # same configuration names: the previous server's registration is replaced
    while _servers:
        _servers.pop().stop()
    _servers.append(server)
    probe_ns = namespace(cp, "sched-probe")
    probe = Case("probe", "Pod", {GPU: 32})

    def in_force() -> bool:
        path, obj = manifest(probe, probe_ns)
        status, body = cp.request("POST", path + "?dryRun=All", obj, as_user=USER)
        return status >= 300 and "[schedulable]" in json.dumps(body)

    cp.wait_for(in_force, timeout=60, interval=0.5, message="gpuguard in force with the shape's nodes")
    return Shape(cp, name, nodes)


@pytest.fixture(scope="module", autouse=True)
def _stop_servers() -> Iterator[None]:
    yield
    while _servers:
        server = _servers.pop()
        server.stop()
        print(f"\n[e2e] gpuguard log: {server.log}")


def _judge(case: Case, raw: Run, guarded: Run) -> list[str]:
    """What is wrong with gpuguard's outcome, in the scheduler's words."""
    why = lambda run: "; ".join(sorted(set(run.pending.values())))[:600]  # noqa: E731
    problems = []
    if case.expect == "deny":
        if guarded.denied is None:
            problems.append(f"expected a [schedulable] denial, got {guarded.describe()}")
        elif "[schedulable]" not in guarded.denied:
            problems.append(f"denied, but not by schedulable: {guarded.denied[:400]}")
        if len(raw.placed) == case.pods:  # (b)
            problems.append(f"denied as unschedulable, yet the unmutated workload was placed whole: {raw.placed}")
        return problems
    if guarded.denied is not None:
        return [f"denied: {guarded.denied[:500]} (unmutated: {raw.describe()})"]
    if not {"cpu", "memory"} <= set(guarded.requests):  # the comparison is only worth it if gpuguard sized them
        problems.append(f"not sized by gpuguard: requests {guarded.requests}")
    if len(guarded.placed) < len(raw.placed):  # (a)
        problems.append(f"{len(guarded.placed)} of {case.pods} placed with gpuguard, {len(raw.placed)} without; "
                        f"the scheduler: {why(guarded)}")
    if case.kind == "Job" and len(guarded.placed) not in (0, case.pods):  # (c)
        problems.append(f"gang placed in part: {len(guarded.placed)} of {case.pods}; the scheduler: {why(guarded)}")
    return problems


def _typed(case: Case, guarded: Run, nodes: list[NodeShape]) -> list[str]:
    if case.lands_on is None or guarded.denied is not None:
        return []
    key, value = case.lands_on
    labels = {n.name: n.labels for n in nodes}
    wrong = {pod: node for pod, node in guarded.placed.items() if labels[node].get(key) != value}
    return [f"pods off their type ({key}={value}): {wrong}"] if wrong else []


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_scheduler_places_what_gpuguard_admits_and_nothing_it_denies(cluster, shape, tmp_path):
    cp = cluster
    t0 = time.monotonic()
    current = use_shape(cp, shape, tmp_path / "gpuguard")
    _, cases = SHAPES[shape]
    raw_ns, guarded_ns = namespace(cp, RAW), namespace(cp, "sched")
    problems: list[str] = []
    totals = {"raw": Counter(), "gpuguard": Counter()}
    idle = 0
    for case in cases:
        raw = run_case(cp, case, raw_ns)
        clean(cp, raw_ns)
        guarded = run_case(cp, case, guarded_ns)
        clean(cp, guarded_ns)
        assert raw.denied is None, f"{case.name}: the exempt namespace was judged: {raw.denied}"
        for label, run in (("raw", raw), ("gpuguard", guarded)):
            if run.denied is not None:
                totals[label]["denied"] += case.pods
            else:
                totals[label]["placed"] += len(run.placed)
                totals[label]["pending"] += len(run.pending)
        if guarded.denied is None:
            idle += max(0, raw.gpus_on() - guarded.gpus_on())
        found = _judge(case, raw, guarded) + _typed(case, guarded, current.nodes)
        if case.same_gpus_on and guarded.denied is None and guarded.gpus_on(case.same_gpus_on) != raw.gpus_on(
                case.same_gpus_on):
            found.append(f"GPUs used on {case.same_gpus_on}*: {guarded.gpus_on(case.same_gpus_on)} with gpuguard, "
                         f"{raw.gpus_on(case.same_gpus_on)} without; per node with: "
                         f"{dict(Counter(guarded.placed.values()))}, without: {dict(Counter(raw.placed.values()))}; "
                         f"pending with gpuguard: {sorted(set(guarded.pending.values()))[:2]}")
        per_node = dict(sorted(Counter(guarded.placed.values()).items()))
        reasons = sorted({m.split(". preemption")[0] for m in [*raw.pending.values(), *guarded.pending.values()]})
        print(f"[{shape}] {case.name}: without {raw.describe()}; with gpuguard {guarded.describe()} {per_node} "
              f"requests {guarded.requests} sized-from {guarded.sized_from!r} pending: {reasons}")
        problems += [f"[{shape}] {case.name}: {p}" for p in found]
    r, g = totals["raw"], totals["gpuguard"]
    FIGURES.rows.append(
        f"  {shape:7} without gpuguard: {r['placed']} placed / {r['pending']} pending / 0 denied;  "
        f"with: {g['placed']} placed / {g['pending']} pending / {g['denied']} denied;  "
        f"GPUs idle by sizing: {idle};  problems: {len(problems)};  {time.monotonic() - t0:.0f} s")
    assert not problems, "\n".join(problems)


def test_a_gang_only_cordoned_nodes_could_complete_is_admitted_with_a_warning_and_pends_in_part(cluster, tmp_path):
    """Cordoned nodes are "not now": gpuguard warns instead of denying, and the default scheduler (no Kueue runs)
    then places the gang pod by pod, as it does the unmutated one — what the warning tells alice."""
    cp = cluster
    use_shape(cp, "onprem", tmp_path / "gpuguard")
    cp.request("PATCH", "/api/v1/nodes/dgx-a100-80-1", {"spec": {"unschedulable": True}}, check=True)
    gang = Case("gang-with-a-cordoned-node", "Job", {GPU: 8}, pods=2)
    raw_ns, guarded_ns = namespace(cp, RAW), namespace(cp, "sched")

    def warned() -> str:
        _, obj = manifest(gang, guarded_ns)
        result = cp.kubectl(f"--as={USER}", "create", "--dry-run=server", "-f", "-", input=json.dumps(obj),
                            check=False)
        assert result.returncode == 0, result.stderr
        return result.stderr if "[schedulable]" in result.stderr else ""

    warning = cp.wait_for(warned, timeout=120, interval=0.5, message="the cordoned node in gpuguard's inventory")
    assert "can't start whole now" in warning and "only cordoned nodes can take" in warning, warning
    raw = run_case(cp, gang, raw_ns)
    clean(cp, raw_ns)
    guarded = run_case(cp, gang, guarded_ns)
    clean(cp, guarded_ns)
    cp.request("PATCH", "/api/v1/nodes/dgx-a100-80-1", {"spec": {"unschedulable": False}}, check=True)
    print(f"[onprem] {gang.name}: without {raw.describe()}; with gpuguard {guarded.describe()} "
          f"pending: {sorted(set(guarded.pending.values()))}")
    assert guarded.denied is None
    assert (len(guarded.placed), len(guarded.pending)) == (len(raw.placed), len(raw.pending)) == (1, 1)
    assert all("unschedulable" in m for m in guarded.pending.values()), guarded.pending
    FIGURES.rows.append(f"  onprem, one DGX cordoned: a 2x8-GPU gang admitted with a warning; placed 1 / pending 1 "
                        f"with and without gpuguard ({next(iter(guarded.pending.values())).split('. preemption')[0]})")
