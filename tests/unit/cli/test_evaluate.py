"""``gpuguard evaluate``: the first README command, end to end through the console entry point."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import jsonpatch

from tests.support.paths import REPO

ROOT = REPO
EXAMPLE = ROOT / "examples" / "gpu-job.yaml"


def gpuguard(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True,
                          input=stdin, cwd=ROOT, timeout=60)


def test_evaluate_json_matches_contract_and_patches_apply():
    import yaml

    proc = gpuguard("evaluate", str(EXAMPLE), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert gpuguard("evaluate", str(EXAMPLE), "--fail-on-deny").returncode == 1  # the first job is denied
    results = json.loads(proc.stdout)
    assert [r["allowed"] for r in results] == [False, True]
    assert results[0]["violations"][0]["policy"] == "checkpoint-volume"
    originals = list(yaml.safe_load_all(EXAMPLE.read_text()))
    for original, result in zip(originals, results, strict=True):
        patched = jsonpatch.apply_patch(copy.deepcopy(original), result["patch"])
        assert patched["spec"]["template"]["spec"]["priorityClassName"] == "training-standard"


def test_evaluate_text_shows_violation_patch_and_mutated_yaml():
    proc = gpuguard("evaluate", str(EXAMPLE))
    assert "DENY  [checkpoint-volume] spec.template.spec.containers[0] (trainer)" in proc.stdout
    assert "mutated object:" in proc.stdout and "priorityClassName: training-standard" in proc.stdout


def test_evaluate_stdin_and_bad_inputs_exit_2_without_traceback(tmp_path):
    ok = gpuguard("evaluate", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert ok.returncode == 0 and "skipped" in ok.stdout
    missing = gpuguard("evaluate", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "gpuguard: error:" in missing.stderr and "Traceback" not in missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Pod\n---\nkey: [unclosed\n")
    proc = gpuguard("evaluate", str(broken))
    assert proc.returncode == 2 and f"{broken}:5: invalid YAML" in proc.stderr and "Traceback" not in proc.stderr
    bad_config = tmp_path / "config.yaml"
    bad_config.write_text("kind: GpuguardConfig\nnope: 1\n")
    proc = gpuguard("evaluate", str(EXAMPLE), "--config", str(bad_config))
    assert proc.returncode == 2 and f"{bad_config}:2: nope: unknown key" in proc.stderr
