"""What gpuguard prints as YAML is plain: no ``&id001`` anchors where a mutated object holds one value twice."""

from __future__ import annotations

import yaml

from gpuguard.webhook.cli.audit import mutation
from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.manifests import plain_yaml
from gpuguard.workloads.inventory import from_objects
from tests.support.builders import make, pvc_pod_spec


def node(name: str, gpus: int, memory: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "accelerator": "nvidia", "node.kubernetes.io/instance-type": name[:-2]}},
        "status": {"allocatable": {"cpu": "95", "memory": memory, "ephemeral-storage": "2800Gi", "pods": "110",
                                   "nvidia.com/gpu": str(gpus)}}}


# Two GPU node groups (AKS NC24ads and ND96asr shapes): the node affinity's values list is given to every template.
NODES = [node("nc24-0", 1, "214Gi"), node("nd96-0", 8, "870Gi")]


def test_a_value_held_twice_is_written_out_twice():
    shared = [{"key": "accelerator", "operator": "In", "values": ["nvidia"]}]
    obj = {"master": {"affinity": shared}, "worker": {"affinity": shared}}
    for text in (plain_yaml(obj), mutation.to_yaml(obj)):
        assert "&id" not in text and "*id" not in text
        assert yaml.safe_load(text) == obj


def test_a_mutated_multi_template_workload_prints_without_anchors():
    engine = Engine(load_config())
    engine.set_nodes(from_objects(NODES))
    decision = engine.evaluate(make("PyTorchJob", pvc_pod_spec(1), replicas=2))
    assert decision.mutated_by
    diff = mutation.yaml_diff(decision.original, decision.mutated, "PyTorchJob ml/w")
    assert diff and "&id" not in diff and "*id" not in diff
