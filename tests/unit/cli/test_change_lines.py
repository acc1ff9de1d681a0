"""The CLI says what the webhook's kubectl warnings say: each value of the user's gpuguard changes, with the
policy and the old and new value, in ``evaluate``, ``audit`` (table and JSON) and ``fix``, from one text
(``gpuguard.webhook.decision.Change.text``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuguard.webhook.main import main

MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  ttlSecondsAfterFinished: 2592000  # 30 days
  template:
    spec:
      restartPolicy: Never
      tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]
      containers:
      - name: trainer
        image: ghcr.io/example/train:1
        resources: {limits: {nvidia.com/gpu: 1}}
        env: [{name: CHECKPOINT_URI, value: "s3://bucket/run"}]
"""
CAPPED = "[job-ttl] capped spec.ttlSecondsAfterFinished on the Job: 2592000 -> 604800 ("
GREW = "[gpu-tolerations] added 1 item to the user's spec.template.spec.tolerations on the Job ("


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(MANIFEST)
    return path


def test_evaluate_text_has_a_changed_line_per_user_value(manifest, capsys) -> None:
    assert main(["evaluate", str(manifest)]) == 0
    changed = [line.removeprefix("  CHANGED ") for line in capsys.readouterr().out.splitlines()
               if line.startswith("  CHANGED ")]
    assert len(changed) == 2 and changed[0].startswith(GREW) and changed[1].startswith(CAPPED)


@pytest.mark.parametrize("verb", ["evaluate", "audit"])
def test_json_results_carry_the_changes(verb, manifest, capsys) -> None:
    main([verb, str(manifest), "--format", "json"])
    out = json.loads(capsys.readouterr().out)
    results = out if verb == "evaluate" else out["results"]
    [changes] = [r["changes"] for r in results]
    assert [(c["policy"], c["how"], c["old"], c["new"]) for c in changes] == [
        ("gpu-tolerations", "extended", 1, 2), ("job-ttl", "capped", 2592000, 604800)]
    assert changes[1]["message"].startswith(CAPPED)


def test_audit_table_lists_changed_values_before_the_patch(manifest, capsys) -> None:
    main(["audit", str(manifest)])
    out = capsys.readouterr().out
    assert f"! {CAPPED}" in out and f"! {GREW}" in out
    assert out.index(f"! {CAPPED}") < out.index("+ replace spec.ttlSecondsAfterFinished: 604800")


def test_fix_names_each_value_it_overwrote(manifest, capsys) -> None:
    main(["fix", str(manifest)])
    out = capsys.readouterr().out
    label = f"{manifest}[0] Job ml/train"
    assert f"changed {label}: {CAPPED}" in out and f"changed {label}: {GREW}" in out
    assert re.search(r"ttlSecondsAfterFinished: 604800 +# 30 days", manifest.read_text())  # the comment kept
    # a fixed file has nothing left to change, so nothing more to say
    main(["fix", str(manifest)])
    assert "changed " not in capsys.readouterr().out
