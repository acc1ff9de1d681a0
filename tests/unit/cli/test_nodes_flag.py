"""``--nodes FILE`` on evaluate, audit, fix and test: the same inventory the webhook's node watch gives."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from gpuguard.webhook.main import main

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cuda", "namespace": "default"},
       "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "ghcr.io/example/app:1",
                                                          "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
NODES = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu", "labels": {"cloud.google.com/gke-nodepool": "d"}},
     "status": {"allocatable": {"cpu": "8", "memory": "30Gi"}}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "l4", "labels": {
        "cloud.google.com/gke-nodepool": "l4", "cloud.google.com/gke-accelerator": "nvidia-l4"}},
     "status": {"allocatable": {"cpu": "23", "memory": "87Gi", "nvidia.com/gpu": "2"}}}]}
GKE_TERM = {"key": "cloud.google.com/gke-accelerator", "operator": "In", "values": ["nvidia-l4"]}


def _files(tmp_path: Path) -> tuple[str, str]:
    pod, nodes = tmp_path / "pod.yaml", tmp_path / "nodes.yaml"
    pod.write_text(yaml.safe_dump(POD))
    nodes.write_text(yaml.safe_dump(NODES))
    return str(pod), str(nodes)


def _affinity(obj: dict) -> dict:
    return obj["spec"]["affinity"]["nodeAffinity"]


def test_evaluate_and_audit_learn_the_label_from_the_nodes(tmp_path, capsys):
    pod, nodes = _files(tmp_path)
    assert main(["evaluate", pod, "--nodes", nodes, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)[0]
    ops = [op for op in result["patch"] if op["path"] == "/spec/affinity"]
    assert ops[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [GKE_TERM]}]}
    assert "nvidia.com/gpu.present" not in json.dumps(result["patch"])
    # A bare pod that runs to completion is warned about checkpoints (its class is only read from its work).
    assert main(["audit", pod, "--nodes", nodes, "--format", "json", "--fail-on", "warn"]) == 1
    audited = json.loads(capsys.readouterr().out)["results"][0]
    assert audited["patch"] == result["patch"]


def test_fix_writes_the_learned_label(tmp_path, capsys):
    pod, nodes = _files(tmp_path)
    assert main(["fix", pod, "--nodes", nodes]) == 0  # written; nothing is denied (the checkpoint finding warns)
    fixed = yaml.safe_load(Path(pod).read_text())
    assert _affinity(fixed)["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [GKE_TERM]}]


def test_without_nodes_the_profile_label_is_only_preferred(tmp_path, capsys):
    pod, _ = _files(tmp_path)
    assert main(["evaluate", pod, "--format", "json"]) == 0
    result = json.loads(capsys.readouterr().out)[0]
    affinity = next(op for op in result["patch"] if op["path"] == "/spec/affinity")["value"]["nodeAffinity"]
    assert list(affinity) == ["preferredDuringSchedulingIgnoredDuringExecution"]


def test_an_unreadable_nodes_file_is_one_error_line(tmp_path, capsys):
    pod, _ = _files(tmp_path)
    broken = tmp_path / "broken.yaml"
    broken.write_text("items: [\n")
    for verb in (["evaluate", pod], ["audit", pod], ["fix", pod, "--stdout"]):
        assert main([*verb, "--nodes", str(broken)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("gpuguard: error: --nodes:") and "Traceback" not in err
    assert main(["evaluate", pod, "--nodes", str(tmp_path / "missing.yaml")]) == 2
    assert "--nodes:" in capsys.readouterr().err


def test_test_verb_takes_nodes_for_cases_without_their_own(tmp_path, capsys):
    pod, nodes = _files(tmp_path)
    case = tmp_path / "suite" / "gke-pod"
    case.mkdir(parents=True)
    (case / "input.yaml").write_text(Path(pod).read_text())
    (case / "expect.yaml").write_text("allowed: true\nmutatedBy: [gpu-node-affinity]\n")
    (tmp_path / "suite" / "suite.yaml").write_text("only: [gpu-node-affinity]\n")
    expected = json.loads(json.dumps(POD))
    expected["metadata"]["annotations"] = {"gpuguard.io/mutated-by": "gpu-node-affinity"}
    expected["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [GKE_TERM]}]}}}
    (case / "mutated.yaml").write_text(yaml.safe_dump(expected))
    assert main(["test", str(tmp_path / "suite"), "--nodes", nodes]) == 0
    assert main(["test", str(tmp_path / "suite")]) == 1  # without the nodes: only a preferred term
    (case / "nodes.yaml").write_text(Path(nodes).read_text())
    assert main(["test", str(tmp_path / "suite")]) == 0  # the case's own nodes.yaml
    capsys.readouterr()
