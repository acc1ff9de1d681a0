"""gpuguard through the whole life of an object, on a real kube-apiserver + kube-controller-manager.

kube-controller-manager runs with ``--use-service-account-credentials`` (each controller sends its
requests as its own service account, as on kubeadm and managed clusters), and every user action
here is taken as the ordinary user ``alice`` (``kubectl --as=alice``, bound to the ``edit``
ClusterRole in her namespace): an admin token would hide identity bugs.

The ReplicaSet scenarios all start first and are judged together after one wait of 20 s, long
enough for the Deployment controller to loop many times if gpuguard made it fight.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable

import pytest
import yaml

from tests.support.gpuguard_process import ROOT, GpuguardServer, default_config_with

pytestmark = pytest.mark.e2e
USER = "alice"
SETTLE_SECONDS = 20
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# ---------------------------------------------------------------- manifests

def deployment(ns: str, name: str, *, gpus: int = 1, replicas: int = 1, own_scheduling: bool = False,
               priority_zero: bool = False) -> dict:
    container: dict = {"name": "server", "image": "ghcr.io/example/serve:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    spec: dict = {"containers": [container]}
    if own_scheduling:
        spec["tolerations"] = [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
            ]}}}
    if priority_zero:
        spec["priority"] = 0
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def job(ns: str, name: str, *, own_scheduling: bool = False) -> dict:
    spec: dict = {
        "restartPolicy": "Never",
        "containers": [{"name": "trainer", "image": "ghcr.io/example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": 1}},
                        "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}],
    }
    if own_scheduling:
        spec["tolerations"] = [{"key": "team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": spec}}}


def dump(obj: dict) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


# ---------------------------------------------------------------- fixtures

class Env:
    """The cluster, gpuguard, and helpers that act as ``alice``."""

    def __init__(self, cp, server: GpuguardServer):
        self.cp = cp
        self.server = server

    def namespace(self, prefix: str = "life") -> str:
        ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.cp.kubectl("create", "namespace", ns)
        self.cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
        return ns

    def as_user(self, *args: str, input: str | None = None, check: bool = True):
        return self.cp.kubectl(f"--as={USER}", *args, input=input, check=check)

    def get(self, *args: str) -> dict:
        return self.cp.kubectl_json("get", *args)

    def replicasets(self, ns: str, deployment_name: str) -> list[dict]:
        items = self.get("replicasets", "-n", ns)["items"]
        return [rs for rs in items if any(ref.get("name") == deployment_name
                                          for ref in rs["metadata"].get("ownerReferences", []))]

    def pods_of(self, ns: str, owner: str) -> list[dict]:
        items = self.get("pods", "-n", ns)["items"]
        return [p for p in items if any(ref.get("name") == owner for ref in p["metadata"].get("ownerReferences", []))]

    def wait(self, fn: Callable, message: str, timeout: float = 90):
        return self.cp.wait_for(fn, timeout=timeout, message=message)


LEGACY: dict[str, str] = {}
# Namespaces strict-* get the shipped default's grants (none): privileged classes are not given there.
STRICT_PROFILE = """
profiles:
  - name: strict
    match: {namespaces: ["strict-*"]}
    policies:
      workload-class: {allowEscalationTo: []}
"""


@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("pytorchjob")
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard"), STRICT_PROFILE.join(
        default_config_with("life-exempt").split("\nprofiles:\n", 1)), kubeconfig=cp.kubeconfig)
    e = Env(cp, server)
    # Deployments that exist before gpuguard is installed (their templates are not in gpuguard's shape);
    # "overcap" holds 9 x 8 = 72 GPUs, over the 64 a workload may have.
    ns = e.namespace()
    for name, gpus, replicas in (("legacy", 1, 1), ("labelled", 1, 1), ("overcap", 8, 9)):
        cp.kubectl("apply", "-f", "-", input=dump(deployment(ns, name, gpus=gpus, replicas=replicas)))
        e.wait(lambda n=name: e.replicasets(ns, n), f"the pre-install Deployment {name}'s ReplicaSet")
    LEGACY["ns"] = ns
    server.start()
    server.register(cp)
    probe = e.namespace()
    e.wait(lambda: e.as_user("apply", "-f", "-", input=dump(deployment(probe, "probe")), check=False).returncode == 0
           and "priorityClassName" in json.dumps(e.get("deployment", "probe", "-n", probe)),
           "gpuguard's webhooks in force")
    yield e
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


# ---------------------------------------------------------------- the ReplicaSet loop

def test_deployments_converge_under_every_re_apply_and_restart(env):
    """Each trigger that made the Deployment controller loop now leaves exactly the expected ReplicaSets."""
    ns = env.namespace()
    expected: dict[str, int] = {}

    # kubectl apply twice of an unchanged manifest with its own tolerations and two nodeSelectorTerms.
    manifest = dump(deployment(ns, "reapply", own_scheduling=True))
    env.as_user("apply", "-f", "-", input=manifest)
    env.wait(lambda: env.replicasets(ns, "reapply"), "first ReplicaSet")
    env.as_user("apply", "-f", "-", input=manifest)
    expected["reapply"] = 1

    # kubectl replace with the same manifest (no gpuguard fields in it).
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "replaced")))
    env.wait(lambda: env.replicasets(ns, "replaced"), "first ReplicaSet")
    env.as_user("replace", "-f", "-", input=dump(deployment(ns, "replaced")))
    expected["replaced"] = 1

    # kubectl patch adding a sidecar without resources: a real template change, one new ReplicaSet.
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "patched")))
    env.wait(lambda: env.replicasets(ns, "patched"), "first ReplicaSet")
    sidecar = {"spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoyproxy/envoy:v1"}]}}}}
    env.as_user("patch", "deployment", "patched", "-n", ns, "--type=strategic", "-p", json.dumps(sidecar))
    expected["patched"] = 2

    # A CPU Deployment switched to GPUs by kubectl apply: mutated on UPDATE and admitted.
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "to-gpu", gpus=0)))
    env.wait(lambda: env.replicasets(ns, "to-gpu"), "first ReplicaSet")
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "to-gpu", gpus=1)))
    expected["to-gpu"] = 2

    # A template carrying priority: 0: its pods must still be created.
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "prio-zero", priority_zero=True)))
    expected["prio-zero"] = 1

    # A Deployment created before gpuguard was registered, restarted afterwards.
    legacy_ns = LEGACY["ns"]
    env.as_user("rollout", "restart", "deployment/legacy", "-n", legacy_ns)

    # The ReplicaSets that must come are waited for (a busy controller-manager may take longer than any
    # fixed pause); then the settle gives any extra ones, a controller loop, the time to appear.
    with contextlib.suppress(TimeoutError):  # if they never come, the assertions below say which one is missing
        env.wait(lambda: all(len(env.replicasets(ns, n)) >= c for n, c in expected.items())
                 and len(env.replicasets(legacy_ns, "legacy")) >= 2, "the expected ReplicaSets", timeout=180)
    time.sleep(SETTLE_SECONDS)

    for name, count in expected.items():
        rss = env.replicasets(ns, name)
        dep = env.get("deployment", name, "-n", ns)
        assert len(rss) == count, f"{name}: {len(rss)} ReplicaSets, expected {count}"
        assert "collisionCount" not in dep.get("status", {}), f"{name}: {dep['status']}"
        template = dep["spec"]["template"]["spec"]
        assert GPU_TOLERATION in template["tolerations"], name
        assert template["priorityClassName"] == "inference-critical" and "priority" not in template, name
        newest = max(rss, key=lambda rs: int(rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]))
        assert newest["spec"]["template"]["spec"] == template, f"{name}: ReplicaSet differs from its template"
        pods = env.wait(lambda n=newest: env.pods_of(ns, n["metadata"]["name"]), f"{name}'s pods")
        for pod in pods:
            assert GPU_TOLERATION in pod["spec"]["tolerations"]
            assert pod["spec"]["priorityClassName"] == "inference-critical"
            server = next(c for c in pod["spec"]["containers"] if c["name"] == "server")
            assert server["resources"]["limits"]["memory"] == "64Gi"
    own = env.get("deployment", "reapply", "-n", ns)["spec"]["template"]["spec"]
    assert own["tolerations"][0]["key"] == "team" and GPU_TOLERATION in own["tolerations"]
    terms = own["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2

    legacy_rss = env.replicasets(legacy_ns, "legacy")
    legacy = env.get("deployment", "legacy", "-n", legacy_ns)
    assert len(legacy_rss) == 2 and "collisionCount" not in legacy.get("status", {})
    assert GPU_TOLERATION in legacy["spec"]["template"]["spec"]["tolerations"]


# ---------------------------------------------------------------- Jobs, caps, scale

@pytest.mark.parametrize("own", [False, True], ids=["plain", "own-tolerations-affinity"])
def test_re_applying_an_unchanged_job_succeeds(env, own):
    ns = env.namespace()
    manifest = dump(job(ns, "train", own_scheduling=own))
    env.as_user("apply", "-f", "-", input=manifest)
    second = env.as_user("apply", "-f", "-", input=manifest, check=False)
    assert second.returncode == 0, second.stderr
    stored = env.get("job", "train", "-n", ns)["spec"]["template"]["spec"]
    assert GPU_TOLERATION in stored["tolerations"]
    pods = env.wait(lambda: env.pods_of(ns, "train"), "the Job controller creates the pod")
    assert GPU_TOLERATION in pods[0]["spec"]["tolerations"]  # created by job-controller, admitted


def test_update_past_the_caps_is_capped(env):
    ns = env.namespace()
    env.as_user("apply", "-f", "-", input=dump(job(ns, "capped")))
    env.as_user("patch", "job", "capped", "-n", ns, "--type=merge", "-p",
                json.dumps({"spec": {"activeDeadlineSeconds": 99_999_999, "ttlSecondsAfterFinished": 99_999_999}}))
    spec = env.get("job", "capped", "-n", ns)["spec"]
    assert spec["activeDeadlineSeconds"] == 604800 and spec["ttlSecondsAfterFinished"] == 604800


def test_kubectl_scale_past_the_gpu_total_is_denied(env):
    ns = env.namespace()
    env.as_user("apply", "-f", "-", input=dump(deployment(ns, "big", gpus=8, replicas=2)))
    within = env.as_user("scale", "deployment/big", "--replicas=8", "-n", ns, check=False)
    assert within.returncode == 0, within.stderr
    result = env.as_user("scale", "deployment/big", "--replicas=9", "-n", ns, check=False)
    assert result.returncode != 0
    assert "[gpu-request-shape]" in result.stderr and "64" in result.stderr
    assert env.get("deployment", "big", "-n", ns)["spec"]["replicas"] == 8


def _scaled_past_the_cap(env, kind: str, specs_key: str, lead: str) -> None:
    """A Kubeflow job of 1 ``lead`` + 1 Worker x 8 GPUs: ``kubectl scale`` of its Workers to 7 (64 GPUs) is admitted,
    to 100 denied by the GPU total, and the stored Worker replicas stay 7 -- as alice."""
    ns = env.namespace()
    env.cp.kubectl("create", "rolebinding", "alice-crd", "--clusterrole=cluster-admin", f"--user={USER}", "-n", ns)
    role = {"template": {"spec": job(ns, "x")["spec"]["template"]["spec"]}}
    role["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    name, resource = kind.lower(), kind.lower()
    obj = {"apiVersion": "kubeflow.org/v1", "kind": kind,
           "metadata": {"name": name, "namespace": ns, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
           "spec": {specs_key: {lead: {"replicas": 1, **role}, "Worker": {"replicas": 1, **role}}}}
    env.as_user("apply", "-f", "-", input=dump(obj))
    within = env.as_user("scale", f"{resource}/{name}", "--replicas=7", "-n", ns, check=False)  # 8 x 8 = 64
    assert within.returncode == 0, within.stderr
    result = env.as_user("scale", f"{resource}/{name}", "--replicas=100", "-n", ns, check=False)
    assert result.returncode != 0 and "[gpu-request-shape]" in result.stderr, result.stderr
    assert env.get(resource, name, "-n", ns)["spec"][specs_key]["Worker"]["replicas"] == 7


def test_kubectl_scale_of_a_pytorchjob_past_its_cap_is_denied(env):
    """The PyTorchJob CRD scales its workers: kubectl scale is judged like a patch of Worker.replicas."""
    _scaled_past_the_cap(env, "PyTorchJob", "pytorchReplicaSpecs", "Master")


def test_kubectl_scale_of_a_kind_whose_crd_declares_the_scale_is_judged_from_the_crd(env):
    """The kind table declares no scale for TFJob; this cluster's CRD does (as Kubeflow's own does, on Worker):
    the webhook's rule covers every custom resource's scale, and the server reads where the replicas land from
    the CRD the cluster serves."""
    crd = yaml.safe_load((ROOT / "tests" / "support" / "cluster" / "crds" / "tfjob.yaml").read_text())
    crd["spec"]["versions"][0]["subresources"]["scale"] = {
        "specReplicasPath": ".spec.tfReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active"}
    env.cp.kubectl("apply", "-f", "-", input=dump(crd))
    env.cp.kubectl("wait", "--for=condition=Established", "crd/tfjobs.kubeflow.org", "--timeout=60s")
    _scaled_past_the_cap(env, "TFJob", "tfReplicaSpecs", "Chief")


def test_a_deployment_already_over_its_cap_may_scale_down_but_not_up(env):
    ns = LEGACY["ns"]  # "overcap": 72 GPUs, created before gpuguard
    up = env.as_user("scale", "deployment/overcap", "--replicas=10", "-n", ns, check=False)
    assert up.returncode != 0 and "[gpu-request-shape]" in up.stderr, up.stderr
    down = env.as_user("scale", "deployment/overcap", "--replicas=8", "-n", ns, check=False)
    assert down.returncode == 0, down.stderr
    assert env.get("deployment", "overcap", "-n", ns)["spec"]["replicas"] == 8


def test_kubectl_label_on_a_pre_install_deployment_rolls_nothing_out(env):
    ns = LEGACY["ns"]
    before = {rs["metadata"]["name"] for rs in env.replicasets(ns, "labelled")}
    result = env.as_user("label", "deployment/labelled", "cost-center=ml", "-n", ns)
    assert "not in gpuguard's shape" in result.stderr and "gpuguard fix" in result.stderr, result.stderr
    time.sleep(5)  # the Deployment controller would have made a ReplicaSet by now
    assert {rs["metadata"]["name"] for rs in env.replicasets(ns, "labelled")} == before
    stored = env.get("deployment", "labelled", "-n", ns)
    assert stored["metadata"]["labels"]["cost-center"] == "ml"
    assert "priorityClassName" not in stored["spec"]["template"]["spec"]


# ---------------------------------------------------------------- privilege from the namespace, not shape

def test_a_training_statefulset_gains_nothing_where_inference_is_not_granted(env):
    """A StatefulSet is a long-running service: judged as a server, which may not preempt here; that it runs
    torchrun is a guess, which only warns about checkpoints."""
    ns = env.namespace("strict")
    spec = job(ns, "x")["spec"]["template"]["spec"]
    spec.pop("restartPolicy")
    spec.pop("volumes")
    spec["containers"][0].pop("volumeMounts")
    spec["containers"][0]["command"] = ["torchrun", "--nnodes=2", "--nproc_per_node=8", "train.py"]
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "pretrain", "namespace": ns},
           "spec": {"replicas": 2, "serviceName": "pretrain", "selector": {"matchLabels": {"app": "pretrain"}},
                    "template": {"metadata": {"labels": {"app": "pretrain"}}, "spec": spec}}}
    result = env.as_user("apply", "-f", "-", input=dump(sts))
    assert "[checkpoint-volume] " in result.stderr and "looks like training" in result.stderr, result.stderr
    template = env.get("statefulset", "pretrain", "-n", ns)["spec"]["template"]["spec"]
    assert template["priorityClassName"] == "inference-standard"


def test_a_notebook_declaration_on_a_job_lowers_nothing(env):
    """A Job runs to completion: declaring it a notebook would drop every check with no deadline to pay for
    it, so the label lowers nothing (the Job keeps training's deadline) and kubectl says so."""
    ns = env.namespace("strict")
    obj = job(ns, "sneaky")
    obj["metadata"]["labels"] = {"gpuguard.io/workload-class": "notebook"}
    result = env.as_user("apply", "-f", "-", input=dump(obj), check=False)
    assert result.returncode == 0 and "[workload-class]" in result.stderr, result.stderr
    assert "declaring 'notebook' lowers no check" in result.stderr
    assert env.get("job", "sneaky", "-n", ns)["spec"]["activeDeadlineSeconds"] == 86400


# ---------------------------------------------------------------- identity, not content

def forged(ns: str, owner_kind: str, owner_api: str, **extra_spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": f"forged-{owner_kind.lower()}", "namespace": ns, "labels": {"notebook-name": "mine"},
        "ownerReferences": [{"apiVersion": owner_api, "kind": owner_kind, "name": "made-up",
                             "uid": str(uuid.uuid4()), "controller": True}]},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "trainer", "image": "ghcr.io/example/train:1",
             "resources": {"limits": {"nvidia.com/gpu": 16}}}], **extra_spec}}


@pytest.mark.parametrize(("owner_kind", "owner_api", "extra", "expected"), [
    ("Job", "batch/v1", {}, ["gpu-request-shape", "checkpoint-volume"]),
    ("Pod", "v1", {}, ["gpu-request-shape", "checkpoint-volume"]),
    ("Deployment", "apps/v1", {"priorityClassName": "inference-critical"}, ["priority-abuse", "checkpoint-volume"]),
])
def test_forged_controller_owner_and_notebook_label_grant_nothing(env, owner_kind, owner_api, extra, expected):
    ns = env.namespace()
    result = env.as_user("apply", "-f", "-", input=dump(forged(ns, owner_kind, owner_api, **extra)), check=False)
    assert result.returncode != 0
    for policy in expected:
        assert f"[{policy}]" in result.stderr, result.stderr


def test_forged_owner_on_a_512_gpu_pytorchjob_is_denied(env):
    ns = env.namespace()
    worker = {"replicas": 64, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "ghcr.io/example/ddp:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {
        "name": "huge", "namespace": ns, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": str(uuid.uuid4()),
             "controller": True}]},
        "spec": {"pytorchReplicaSpecs": {"Master": {**worker, "replicas": 1}, "Worker": worker}}}
    env.cp.kubectl("create", "rolebinding", "alice-crd", "--clusterrole=cluster-admin", f"--user={USER}", "-n", ns)
    result = env.as_user("apply", "-f", "-", input=dump(obj), check=False)
    assert result.returncode != 0 and "[gpu-request-shape]" in result.stderr, result.stderr
