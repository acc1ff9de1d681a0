"""``gpuguard audit --cluster`` against the real control plane.

Real objects, as the apiserver stores them (defaulted fields, status, managedFields, uids),
and real controllers: kube-controller-manager turns the Job into a Pod and the Deployment
into a ReplicaSet and Pods, which the audit must not count twice.  The PyTorchJob CRD is
installed and the JobSet CRD is not, so discovery decides what is listed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cluster.fixtures import control_plane  # noqa: F401 - pytest fixture

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
NS_A, NS_B = "audit-e2e-a", "audit-e2e-b"

MANIFESTS = f"""
apiVersion: v1
kind: Namespace
metadata:
  name: {NS_A}
  labels:
    team: ml-research
---
apiVersion: v1
kind: Namespace
metadata:
  name: {NS_B}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: bert-pretrain
  namespace: {NS_A}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: pretrain
        image: nvcr.io/nvidia/pytorch:24.05-py3
        resources:
          limits:
            nvidia.com/gpu: 2
        volumeMounts:
        - name: scratch
          mountPath: /checkpoints
      volumes:
      - name: scratch
        emptyDir: {{}}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  namespace: {NS_A}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: vllm}}
  template:
    metadata:
      labels: {{app: vllm}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.4.3
        resources:
          limits:
            nvidia.com/gpu: 1
            memory: 32Gi
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: resnet
  namespace: {NS_B}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/example-ml/resnet-train:1.4.0
            resources:
              limits: {{nvidia.com/gpu: 4, memory: 128Gi}}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
          - name: pytorch
            image: ghcr.io/example-ml/resnet-train:1.4.0
            resources:
              limits: {{nvidia.com/gpu: 4, memory: 128Gi}}
"""


@pytest.fixture(scope="module")
def cluster(control_plane):  # noqa: F811 - the imported fixture
    cp = control_plane
    cp.install_crds("pytorchjob")
    cp.kubectl("apply", "-f", "-", input=MANIFESTS)

    def controllers_done() -> bool:
        pods = cp.kubectl_json("get", "pods", "-n", NS_A)["items"]
        replicasets = cp.kubectl_json("get", "replicasets", "-n", NS_A)["items"]
        return len(pods) >= 3 and len(replicasets) == 1

    cp.wait_for(controllers_done, timeout=60, message="Job and Deployment pods created")
    return cp


def audit(cp, *args: str) -> tuple[int, dict, str]:
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", "--cluster", "--kubeconfig",
                           str(cp.kubeconfig), "--format", "json", *args],
                          capture_output=True, text=True, cwd=ROOT, env={**cp.env, "CI": "1"}, timeout=180)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def ours(data: dict) -> list[tuple[str, str, str]]:
    return sorted((r["kind"], r["namespace"], r["name"]) for r in data["results"]
                  if r.get("namespace") in (NS_A, NS_B))


def test_all_namespaces_counts_each_workload_once(cluster) -> None:
    code, data, _ = audit(cluster, "--all-namespaces", "--chunk-size", "1")
    assert ours(data) == [("Deployment", NS_A, "vllm"), ("Job", NS_A, "bert-pretrain"),
                          ("PyTorchJob", NS_B, "resnet")]
    summary = data["summary"]
    assert summary["sources"][0].startswith("cluster:")
    assert any("not served by this cluster" in n and "JobSet" in n for n in summary["notes"])
    assert any("not counted twice" in n for n in summary["notes"])
    by_name = {r["name"]: r for r in data["results"] if r.get("namespace") in (NS_A, NS_B)}
    job = by_name["bert-pretrain"]
    assert any(v["policy"] == "checkpoint-volume" and v["action"] == "deny" for v in job["violations"])
    assert {"job-ttl", "job-limits"} <= set(job["mutatedBy"])
    assert job["costAtRisk"]["gpus"] == 2
    # Evaluated as the object a user would create: nothing server-set shows up in the patch.
    for result in by_name.values():
        assert not any(op["path"].startswith(("/status", "/metadata/managedFields", "/metadata/uid"))
                       for op in result["patch"])
    assert any(v["policy"] == "gang-scheduling" for v in by_name["resnet"]["violations"])
    assert code == 1 and summary["exitCode"] == 1


def test_namespace_scope_and_labels(cluster) -> None:
    code, data, _ = audit(cluster, "--namespace", NS_B)
    assert ours(data) == [("PyTorchJob", NS_B, "resnet")]
    assert {r["namespace"] for r in data["results"]} == {NS_B}

    from kubernetes import config as k8s_config

    from gpuguard.webhook.cli.audit.cluster import ClusterLister

    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        listed = list(ClusterLister(api, namespace=NS_A).objects())
    finally:
        api.close()
    assert {d.obj["metadata"]["name"] for d, _ in listed} == {"bert-pretrain", "vllm"}
    assert all(ctx.operation == "CREATE" and ctx.namespace_labels.get("team") == "ml-research" for _, ctx in listed)


def test_table_and_sarif_from_a_cluster(cluster, tmp_path: Path) -> None:
    sarif = tmp_path / "cluster.sarif"
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", "--cluster", "-n", NS_A, "--kubeconfig",
                           str(cluster.kubeconfig), "--format", "sarif", "--output-file", str(sarif)],
                          capture_output=True, text=True, cwd=ROOT, env={**cluster.env, "CI": "1"}, timeout=180)
    assert proc.returncode == 1, proc.stderr
    run = json.loads(sarif.read_text())["runs"][0]
    locations = [r["locations"][0] for r in run["results"]]
    assert locations and all("physicalLocation" not in loc for loc in locations)
    assert {loc["logicalLocations"][0]["fullyQualifiedName"] for loc in locations} >= {
        f"Job/{NS_A}/bert-pretrain"}


def test_lookup_cluster_reads_the_runtime_a_trainjob_file_names(cluster, tmp_path) -> None:
    """CI audits TrainJob manifests whose runtimes live in the cluster (Trainer ships them there)."""
    cp = cluster
    cp.install_crds("clustertrainingruntime")
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
               "metadata": {"name": "torch-e2e-lookup"},
               "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [{
                   "name": "node", "template": {"spec": {"template": {"spec": {
                       "restartPolicy": "OnFailure",
                       "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1"}]}}}}}]}}}}
    cp.kubectl("apply", "-f", "-", input=json.dumps(runtime))
    trainjob = tmp_path / "trainjob.yaml"
    trainjob.write_text(json.dumps({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "tune", "namespace": NS_A},
        "spec": {"runtimeRef": {"name": "torch-e2e-lookup"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}}}))

    def run(*args: str) -> tuple[int, dict]:
        proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(trainjob), "--format", "json",
                               *args], capture_output=True, text=True, cwd=ROOT, env={**cp.env, "CI": "1"},
                              timeout=180)
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.returncode, json.loads(proc.stdout)

    code, data = run("--fail-on", "never")
    (entry,) = data["results"]
    assert code == 0 and [v["policy"] for v in entry["violations"]] == ["not-fully-checked"]
    code, data = run("--lookup-cluster", "--kubeconfig", str(cp.kubeconfig))
    (entry,) = data["results"]
    policies = {v["policy"] for v in entry["violations"]}
    assert "not-fully-checked" not in policies and "checkpoint-volume" in policies
    assert all(v["path"].startswith("runtime ClusterTrainingRuntime torch-e2e-lookup: ") for v in entry["violations"])
    assert entry["gpus"] == 8 and code == 1


UNKNOWN_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "finetunes.llmops.example.dev"},
    "spec": {"group": "llmops.example.dev", "scope": "Namespaced",
             "names": {"kind": "FineTune", "plural": "finetunes", "singular": "finetune", "listKind": "FineTuneList"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "trainer": {"type": "object", "properties": {
                         "nodes": {"type": "integer"},
                         "podSpec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
                             "containers": {"type": "array", "items": {
                                 "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                 "properties": {"name": {"type": "string"}, "image": {"type": "string"}}}}}}}}}}}}}}]}}


def test_a_kind_gpuguard_does_not_know_is_found_by_its_schema_and_reported(cluster) -> None:
    """A CRD nobody told gpuguard about whose schema holds a PodSpec is listed, and an object of it asking for
    GPUs is reported as not fully checked, with its count: never passed in silence."""
    ns = "audit-e2e-c"
    cluster.kubectl("create", "namespace", ns)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(UNKNOWN_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/finetunes.llmops.example.dev")
    tune = {"apiVersion": "llmops.example.dev/v1beta1", "kind": "FineTune",
            "metadata": {"name": "sft", "namespace": ns},
            "spec": {"trainer": {"nodes": 2, "podSpec": {"containers": [{
                "name": "sft", "image": "registry.example/sft:3", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(tune))
    code, data, _ = audit(cluster, "--namespace", ns)
    (result,) = [r for r in data["results"] if r["kind"] == "FineTune"]
    (finding,) = result["violations"]
    assert finding["policy"] == "not-fully-checked"
    assert "unknown kind FineTune (llmops.example.dev/v1beta1) with 16 accelerators" in finding["message"]
    assert code == 1
