"""The ``gpuguard audit`` command: flags, exit codes, errors without tracebacks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.main import main
from tests.support.paths import REPO

ROOT = REPO
M = ROOT / "tests" / "fixtures" / "manifests"
CLEAN = str(M / "training" / "llama-finetune-job.yaml")  # nothing to warn or deny (it selects its GPU nodes)
CHANGED = str(M / "training" / "jobset-gpt.yaml")  # mutated, but nothing to warn or deny
DENIED = str(M / "training" / "bert-pretrain-job.yaml")
WARNED = str(M / "inference" / "vllm-deployment-spot.yaml")
BROKEN = str(M / "invalid" / "broken-stream.yaml")
SERVING = str(ROOT / "tests" / "fixtures" / "configs" / "serving-grants.yaml")  # inference granted


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("args", "expected"), [
    ((CLEAN,), 0),
    ((DENIED,), 1),
    ((WARNED,), 0),
    ((WARNED, "--fail-on", "warn"), 1),
    ((DENIED, "--fail-on", "never"), 0),
    ((BROKEN,), 2),
    ((BROKEN, "--fail-on", "never"), 2),  # an incomplete audit never passes
    ((CLEAN, DENIED, BROKEN), 2),  # 2 wins over 1
])
def test_exit_codes(capsys, args: tuple[str, ...], expected: int) -> None:
    code, out, err = run(capsys, "audit", *args, "--format", "json", "--config", SERVING)
    assert code == expected
    assert json.loads(out)["summary"]["exitCode"] == expected
    assert "Traceback" not in err


def test_broken_input_is_reported_and_the_rest_audited(capsys) -> None:
    code, out, _ = run(capsys, "audit", BROKEN, "--format", "table")
    assert code == 2
    assert "broken-stream.yaml:23" in out and "invalid YAML" in out
    assert "before-the-break" in out and "after-the-break" in out


@pytest.mark.parametrize("argv", [
    ("audit",),
    ("audit", CLEAN, "--all-namespaces"),
    ("audit", "--cluster", "-n", "a", "-A"),
    ("audit", CLEAN, "--context", "x"),
    ("audit", CLEAN, "--diff", "--format", "json"),
    ("audit", CLEAN, "--namespace-label", "novalue"),
    ("audit", "-", "-"),
])
def test_usage_errors_exit_2_with_one_line(capsys, argv: tuple[str, ...]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("gpuguard: error: ") and err.count("\n") == 1


def test_argparse_errors_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["audit", CLEAN, "--fail-on", "sometimes"])
    assert exc.value.code == 2


def test_bad_config_reports_file_and_line(capsys, tmp_path: Path) -> None:
    config = tmp_path / "gpuguard.yaml"
    config.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nnotAKey: 1\n")
    code, _, err = run(capsys, "audit", CLEAN, "--config", str(config))
    assert code == 2 and err.startswith(f"gpuguard: error: {config}:3")
    code, _, err = run(capsys, "audit", CLEAN, "--config", str(tmp_path / "missing.yaml"))
    assert code == 2 and err.startswith("gpuguard: error:") and "Traceback" not in err


def test_output_file_and_diff_to_stdout(capsys, tmp_path: Path) -> None:
    report = tmp_path / "audit.sarif"
    code, out, _ = run(capsys, "audit", CHANGED, "--format", "sarif", "--output-file", str(report), "--diff")
    assert code == 0
    assert json.loads(report.read_text())["version"] == "2.1.0"
    assert out.startswith("--- JobSet ml-research/gpt-1b-pretrain (submitted)")
    assert any(line.startswith("+") and line.strip().endswith("affinity:") for line in out.splitlines())


def test_stdin(capsys, monkeypatch) -> None:
    data = Path(DENIED).read_bytes() + b"---\n" + Path(CLEAN).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = run(capsys, "audit", "-", "--format", "json")
    results = json.loads(out)["results"]
    assert code == 1 and [r["source"] for r in results] == ["<stdin>", "<stdin>"]
    assert results[1]["line"] > results[0]["line"]


def test_default_namespace_for_objects_without_one(capsys, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n")
    _, out, _ = run(capsys, "audit", str(manifest), "--format", "json", "-n", "team-a")
    assert json.loads(out)["results"][0]["namespace"] == "team-a"


def test_an_engine_crash_costs_one_object(capsys, monkeypatch) -> None:
    real = Engine.evaluate

    def flaky(self, obj, ctx=None):
        if obj.get("metadata", {}).get("name") == "bert-large-pretrain":
            raise RuntimeError("boom")
        return real(self, obj, ctx)

    monkeypatch.setattr(Engine, "evaluate", flaky)
    code, out, err = run(capsys, "audit", DENIED, CLEAN, "--format", "json")
    data = json.loads(out)
    assert code == 2 and data["summary"]["engineErrors"] == 1 and data["summary"]["workloads"] == 1
    assert data["results"][0]["errorType"] == "engine-error" and "boom" in data["results"][0]["error"]
    assert "Traceback" not in err


def test_cluster_without_kubeconfig_is_a_clean_error(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, _, err = run(capsys, "audit", "--cluster", "--kubeconfig", str(tmp_path / "nope"))
    assert code == 2 and err.startswith("gpuguard: error: cannot load kubeconfig")


def test_no_traceback_reaches_users_from_the_real_entry_point(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(bad), str(tmp_path / "missing")],
                          capture_output=True, text=True, cwd=ROOT, env={"PATH": "/usr/bin:/bin", "CI": "1"},
                          timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "bad.yaml:" in proc.stdout and "missing" in proc.stdout


def test_ignore_non_kubernetes_for_pre_commit(capsys) -> None:
    values = str(M / "invalid" / "values.yaml")
    assert run(capsys, "audit", values, CLEAN, "--format", "json")[0] == 2
    code, out, _ = run(capsys, "audit", values, CLEAN, "--format", "json", "--ignore-non-kubernetes")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["inputErrors"] == 0 and "ignored" in summary["notes"][0]
    # Invalid YAML is never ignored.
    assert run(capsys, "audit", BROKEN, "--ignore-non-kubernetes", "--format", "json")[0] == 2


def test_ci_examples_use_real_flags() -> None:
    """The pre-commit hook and the GitHub Actions example must keep working as flags evolve."""
    import shlex

    import yaml

    from gpuguard.webhook.main import build_parser

    parser = build_parser()
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    hook = hooks["gpuguard-audit"]
    argv = shlex.split(hook["entry"])[1:] + ["k8s/job.yaml"]
    args = parser.parse_args(argv)
    assert args.command == "audit" and args.ignore_non_kubernetes and args.paths == ["k8s/job.yaml"]
    workflow = yaml.safe_load((ROOT / "docs" / "ci" / "github-actions-audit.yml").read_text())
    scripts = "\n".join(step.get("run", "") for step in workflow["jobs"]["audit"]["steps"])
    for flag in ("-o sarif", "-o junit", "-o html", "--fail-on", "--exclude", "--output-file"):
        assert flag in scripts
        assert flag.split()[0] in parser._subparsers._group_actions[0].choices["audit"].format_help()


def test_table_diff_in_a_pipe_keeps_every_line_whole(tmp_path: Path) -> None:
    """`gpuguard audit --diff | grep ...` must see full lines: no cropping at a terminal width."""
    image = "registry.example.com/" + "very-long-path/" * 8 + "trainer:" + "a" * 40
    manifest = tmp_path / "job.yaml"
    manifest.write_text(f"""apiVersion: batch/v1
kind: Job
metadata: {{name: long, namespace: ml}}
spec:
  template:
    spec:
      restartPolicy: Never
      volumes: [{{name: ckpt, persistentVolumeClaim: {{claimName: ckpt}}}}]
      containers:
      - name: trainer
        image: {image}
        volumeMounts: [{{name: ckpt, mountPath: /checkpoints}}]
        resources: {{limits: {{nvidia.com/gpu: 1}}}}
""")
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "audit", str(manifest), "--diff"],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(image) > 120 and any(line.strip().endswith(image) for line in proc.stdout.splitlines())
