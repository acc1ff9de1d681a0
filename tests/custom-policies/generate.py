"""Write a denied and an allowed case for every workload kind into this folder.

``python tests/custom-policies/generate.py`` after a kind is added to ``gpuguard.workloads.kinds.KINDS``
(and its builder to ``tests/support/builders.py``); ``tests/unit/cli/test_test_verb.py`` fails until
every kind has its cases.  The expected findings come from the kind table (each template's
PodSpec path), not from running gpuguard, so the cases check the engine rather than echo it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from gpuguard.webhook.config import parse_config_text  # noqa: E402
from gpuguard.workloads import kinds  # noqa: E402
from gpuguard.workloads.paths import dotted  # noqa: E402
from gpuguard.workloads.view import build_view  # noqa: E402
from tests.support.builders import ADAPTED_KINDS, ALL_KINDS, gpu_container, make  # noqa: E402


def folder(name: str) -> str:
    return {"VolcanoJob": "volcano-job"}.get(name) or name.lower()


ACCELERATORS = parse_config_text("kind: GpuguardConfig\n").accelerators


def dump(path: Path, data: dict) -> None:
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def main() -> None:
    for name in [*ALL_KINDS, *ADAPTED_KINDS]:
        bad = make(name, {"restartPolicy": "Never", "containers": [gpu_container(1, image="ghcr.io/example/train:1")]},
                   replicas=2, namespace="ml")
        bad.setdefault("metadata", {}).setdefault("labels", {})["app"] = "train"
        spec = kinds.lookup(bad["apiVersion"], bad["kind"])
        assert spec is not None
        refs = [t.ref for t in build_view(bad, spec, ACCELERATORS, "training").gpu_templates]
        denied = HERE / folder(name) / "denied"
        denied.mkdir(parents=True, exist_ok=True)
        dump(denied / "input.yaml", bad)
        dump(denied / "expect.yaml", {
            "description": f"A GPU {name} without a team label and with a ghcr.io image is denied by both rules, "
                           f"on each of its {len(refs)} GPU pod template(s)",
            "allowed": False,
            "violations": [{"policy": "team-label", "action": "deny", "path": "metadata.labels.team"}]
            + [{"policy": "gpu-registry", "action": "deny", "path": dotted(r.spec_path) + ".containers"}
               for r in refs]})
        good = make(name, {"restartPolicy": "Never",
                           "containers": [gpu_container(1, image="registry.corp/vision/train:1")]},
                    replicas=2, namespace="ml")
        good["metadata"]["labels"] = {"app": "train", "team": "vision"}
        allowed = HERE / folder(name) / "allowed"
        allowed.mkdir(parents=True, exist_ok=True)
        dump(allowed / "input.yaml", good)
        dump(allowed / "expect.yaml", {
            "description": f"A GPU {name} with a team label and registry.corp images passes both rules",
            "allowed": True, "violations": []})


if __name__ == "__main__":
    main()
