"""Accelerators learned, not listed, in every shell beside the engine: ``gpuguard audit`` (DeviceClasses among the
audited files, the note on what it could not count, ``--nodes``), ``gpuguard fix`` and the scan on a null GPU count,
``gpuguard webhook-config --nodes`` and the server's node watch reading DeviceClasses.

The webhook, ``evaluate``, ``audit``, ``test`` and ``fix`` agreeing on the fixtures (``tests/policies/checkpoint-volume/
learned-accelerators``, ``gpu-request-shape/gpu-count-null``) and on a null count is ``test_shells_agree``'s.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuguard.kubeapi.client import ApiError
from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.main import main
from gpuguard.webhook.scan import report
from gpuguard.webhook.scan.judge import judge, policy_ids, policy_titles
from gpuguard.webhook.scan.report import Subject
from gpuguard.webhook.server import nodewatch


def job(name: str, limits: dict) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "trainer", "image": "ghcr.io/example/trainer:1", "command": ["python", "train.py"],
                 "resources": {"limits": limits}}]}}}}


DEVICE_CLASS = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "npu.example.com"},
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "npu.example.com"'}}],
                         "extendedResourceName": "example.com/npu"}}
NODES = {"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "npu-1"},
     "status": {"allocatable": {"cpu": "96", "memory": "768Gi", "acme.ai/npu": "8"}}}]}
NULL_GPU = """\
apiVersion: batch/v1
kind: Job
metadata: {name: null-gpu, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/example/trainer:1
        resources:
          limits:
            nvidia.com/gpu:
"""


def _write(path: Path, *docs: dict) -> str:
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return str(path)


def _audit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["audit", *args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_audit_learns_a_deviceclass_from_the_audited_files(tmp_path, capsys):
    manifest = _write(tmp_path / "all.yaml", job("npu", {"example.com/npu": 2}), DEVICE_CLASS)
    code, data = _audit(capsys, manifest)
    (result,) = [r for r in data["results"] if r["kind"] == "Job"]
    assert code == 1 and result["allowed"] is False
    assert "checkpoint-volume" in {v["policy"] for v in result["violations"] if v["action"] == "deny"}
    # without the DeviceClass the name is unknown: not counted, and said so
    code, data = _audit(capsys, _write(tmp_path / "job.yaml", job("npu", {"example.com/npu": 2})))
    assert code == 0 and data["results"][0]["allowed"] is True
    assert any("not counted as accelerators" in n and "example.com/npu (1 object)" in n
               for n in data["summary"]["notes"])


def test_audit_learns_a_vendor_resource_from_the_nodes(tmp_path, capsys):
    manifest = _write(tmp_path / "job.yaml", job("npu", {"acme.ai/npu": 4}))
    nodes = _write(tmp_path / "nodes.yaml", NODES)
    code, data = _audit(capsys, manifest, "--nodes", nodes)
    assert code == 1 and data["results"][0]["allowed"] is False and not data["summary"]["notes"]


def test_audit_refuses_a_null_gpu_count(tmp_path, capsys):
    path = tmp_path / "null.yaml"
    path.write_text(NULL_GPU)
    code, data = _audit(capsys, str(path))
    (violation,) = data["results"][0]["violations"]
    assert code == 1 and data["summary"]["denied"] == 1
    assert (violation["policy"], violation["action"]) == ("invalid-quantity", "deny")
    assert violation["path"] == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"


def test_evaluate_refuses_a_null_gpu_count(tmp_path, capsys):
    path = tmp_path / "null.yaml"
    path.write_text(NULL_GPU)
    assert main(["evaluate", str(path), "--fail-on-deny"]) == 1
    assert "[invalid-quantity]" in capsys.readouterr().out


def test_fix_says_it_cannot_fix_a_null_gpu_count_and_leaves_the_file(tmp_path, capsys):
    path = tmp_path / "null.yaml"
    path.write_text(NULL_GPU)
    assert main(["fix", str(path)]) == 1
    said = capsys.readouterr()
    text = said.out + said.err
    assert "DENIED" in text and "[invalid-quantity]" in text and "an accelerator count must be a number" in text
    assert path.read_text() == NULL_GPU


def test_the_scan_reports_a_null_gpu_count_as_failing(tmp_path):
    config = load_config()
    obj = yaml.safe_load(NULL_GPU)
    outcome = judge(Engine(config).evaluate, obj, RequestContext(operation="CREATE", namespace="ml"),
                    Subject("batch/v1", "Job", "ml", "null-gpu", "uid-1"), policy_ids(config), policy_titles(config))
    built = report.build(outcome, 1_790_000_000.0)
    failing = [r for r in built.report["results"] if r["result"] == "fail"]
    assert [r["policy"] for r in failing] == ["invalid-quantity"]


def test_webhook_config_lets_learned_accelerators_through(tmp_path, capsys):
    nodes = _write(tmp_path / "nodes.yaml", NODES, DEVICE_CLASS)
    assert main(["webhook-config", "--service", "gpuguard/gpuguard", "--nodes", nodes]) == 0
    learned = capsys.readouterr().out
    assert "acme.ai/npu" in learned and "example.com/npu" in learned
    assert main(["webhook-config", "--service", "gpuguard/gpuguard"]) == 0
    assert "acme.ai/npu" not in capsys.readouterr().out


class _Classes:
    """The custom-objects API as the node watch's DeviceClass read sees it: v1 not served, v1beta2 is."""

    def __init__(self, items: list[dict]) -> None:
        self.items, self.asked = items, []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_: Any) -> dict:
        self.asked.append((group, version, plural))
        if version == "v1":
            raise ApiError(status=404)
        return {"items": self.items}


def test_the_node_watch_reads_deviceclasses_into_the_inventory(monkeypatch):
    api = _Classes([{**DEVICE_CLASS, "apiVersion": "resource.k8s.io/v1beta2", "metadata": {
        "name": "npu.example.com", "uid": "1", "managedFields": [{}]}}])
    monkeypatch.setattr(nodewatch, "custom_objects", lambda _client: api)
    seen: list = []
    watch = nodewatch.NodeWatch(object(), seen.append)
    watch.read_device_classes()
    assert api.asked == [("resource.k8s.io", "v1", "deviceclasses"), ("resource.k8s.io", "v1beta2", "deviceclasses")]
    inventory = watch.summarise()
    assert [(c.name, c.extended_resource) for c in inventory.device_classes] == [("npu.example.com", "example.com/npu")]
    engine = Engine(load_config())
    engine.set_nodes(seen[-1])
    assert engine.evaluate(job("npu", {"example.com/npu": 2})).gpus == 2
