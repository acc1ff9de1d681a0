"""Custom CEL rules through the real kube-apiserver, with kubectl, and in ``audit --cluster``.

gpuguard serves the shipped default config plus two custom rules (a team label on every GPU
workload; GPU pods' images from the team registry) and a profile that turns them into warnings
in sandbox namespaces.  The tests read what the apiserver answered or stored, then audit the
cluster with the same config file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import yaml

from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, GpuguardServer

pytestmark = pytest.mark.e2e

CUSTOM = """
customPolicies:
  - id: team-label
    title: GPU workloads carry a team label for chargeback
    scope: object
    matchConditions:
      - name: uses-accelerators
        expression: workload.acceleratorsTotal > 0
    validations:
      - expression: "object.?metadata.?labels.?team.orValue('') != ''"
        messageExpression: >-
          'GPU ' + workload.kind + ' ' + request.name + ' has no team label: its '
          + string(workload.acceleratorsTotal) + ' GPUs cannot be charged back'
        fieldPath: metadata.labels.team
        fix: "add the label team: <your team> to metadata.labels"
  - id: gpu-registry
    scope: podTemplate
    matchConditions:
      - name: gpu-pod
        expression: template.acceleratorsPerPod > 0
    validations:
      - expression: "podSpec.containers.all(c, c.image.startsWith('registry.corp/'))"
        message: images of GPU pods must come from registry.corp
        fieldPath: containers
"""


def config_text(sandbox_warns: bool) -> str:
    """The shipped default config plus the custom rules and, first, a profile for ``sandbox-*`` namespaces.

    By name, not by label: the server here runs without ``--namespace-labels`` (no API access).
    """
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["customPolicies"] = yaml.safe_load(CUSTOM)["customPolicies"]
    policies = {"team-label": {"action": "warn"}} if sandbox_warns else {}
    data["profiles"].insert(0, {"name": "team-sandbox", "match": {"namespaces": ["sandbox-*"]},
                                "policies": policies})
    return yaml.safe_dump(data, sort_keys=False)


def pytorchjob(ns: str, name: str, labels: dict | None = None, image: str = "registry.corp/vision/resnet:2.1") -> str:
    """A GPU PyTorchJob the built-in policies admit (Kueue queue, checkpoint PVC): only custom rules decide."""
    def template() -> dict:
        return {"spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "pytorch", "image": image,
                            "env": [{"name": "CHECKPOINT_DIR", "value": "/checkpoints"}],
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}],
            "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]}}
    # Gang-scheduled through Kueue, so that gang-scheduling admits it (a label is all it checks).
    meta: dict = {"name": name, "namespace": ns,
                  "labels": {"kueue.x-k8s.io/queue-name": "vision", **(labels or {})}}
    return yaml.safe_dump({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template()},
                                                            "Worker": {"replicas": 2, "template": template()}}}})


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("pytorchjob")
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-custom"), config_text(sandbox_warns=True))
    server.start()
    server.register(cp)

    def in_force() -> bool:
        ns = namespace(cp)
        result = cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "probe"), check=False)
        return result.returncode != 0 and "team-label" in result.stderr

    cp.wait_for(in_force, timeout=60, message="gpuguard webhooks with custom rules in force")
    yield cp, server
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


def namespace(cp, prefix: str = "custom") -> str:
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    return ns


def test_a_custom_rule_denies_a_gpu_pytorchjob_at_kubectl_apply_with_its_message(cluster):
    cp, _ = cluster
    ns = namespace(cp)
    result = cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "resnet"), check=False)
    assert result.returncode != 0
    assert 'admission webhook "kubeflow.org.validate.gpuguard.io" denied the request' in result.stderr
    assert ("[team-label] metadata.labels.team: GPU PyTorchJob resnet has no team label: its 3 GPUs cannot be "
            "charged back; add the label team: <your team> to metadata.labels.") in result.stderr
    assert cp.kubectl("get", "pytorchjob", "resnet", "-n", ns, check=False).returncode != 0

    cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "resnet", labels={"team": "vision"}))
    stored = cp.kubectl_json("get", "pytorchjob", "resnet", "-n", ns)
    assert stored["metadata"]["labels"]["team"] == "vision"
    # the built-in mutations still applied to every template
    for role in ("Master", "Worker"):
        assert stored["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["priorityClassName"] == \
            "training-standard"


def test_a_pod_template_rule_names_each_template_of_the_pytorchjob(cluster):
    cp, _ = cluster
    ns = namespace(cp)
    job = pytorchjob(ns, "hub-image", labels={"team": "vision"}, image="pytorch/pytorch:2.3.0-cuda12.1")
    result = cp.kubectl("apply", "-f", "-", input=job, check=False)
    assert result.returncode != 0
    for role in ("Master", "Worker"):
        assert (f"[gpu-registry] spec.pytorchReplicaSpecs.{role}.template.spec.containers ({role}): images of GPU "
                "pods must come from registry.corp") in result.stderr


def test_a_profile_makes_the_rule_a_kubectl_warning_and_audit_cluster_reports_it(cluster, tmp_path):
    cp, server = cluster
    ns = namespace(cp, "sandbox")
    result = cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "sandboxed"))
    assert "Warning: [team-label] GPU PyTorchJob sandboxed has no team label: its 3 GPUs" in result.stderr
    assert cp.kubectl_json("get", "pytorchjob", "sandboxed", "-n", ns)["metadata"]["name"] == "sandboxed"

    # The same config file, audited against what the cluster stores: the profile applies ...
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", "--cluster", "-n", ns, "--kubeconfig",
                           str(cp.kubeconfig), "--config", str(server.config), "--format", "json",
                           "--fail-on", "warn"],
                          capture_output=True, text=True, cwd=ROOT, env={**cp.env, "CI": "1"}, timeout=180)
    assert "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout)
    [entry] = [r for r in data["results"] if r["name"] == "sandboxed"]
    custom = [v for v in entry["violations"] if v["policy"] == "team-label"]
    assert custom == [{"policy": "team-label", "action": "warn", "path": "metadata.labels.team",
                       "fix": "add the label team: <your team> to metadata.labels",
                       "message": "[team-label] metadata.labels.team: GPU PyTorchJob sandboxed has no team label: its "
                                  "3 GPUs cannot be charged back; add the label team: <your team> to metadata.labels."}]
    assert proc.returncode == 1

    # ... and with a config whose sandbox profile does not soften the rule, it denies.
    enforcing = tmp_path / "enforce.yaml"
    enforcing.write_text(config_text(sandbox_warns=False))
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", "--cluster", "-n", ns, "--kubeconfig",
                           str(cp.kubeconfig), "--config", str(enforcing), "--format", "sarif"],
                          capture_output=True, text=True, cwd=ROOT, env={**cp.env, "CI": "1"}, timeout=180)
    assert "Traceback" not in proc.stderr, proc.stderr
    run = json.loads(proc.stdout)["runs"][0]
    results = [r for r in run["results"] if r["ruleId"] == "team-label"]
    assert results and results[0]["level"] == "error" and "has no team label" in results[0]["message"]["text"]
    assert proc.returncode == 1
