"""``gpuguard fix``: mutations written into manifest files, everything else kept byte for byte.

Run through the real CLI entry point on real files; the fixed files are then evaluated again by
the real engine to prove that ``kubectl apply`` would have nothing left to change.
"""

from __future__ import annotations

import json

import pytest
import yaml

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from gpuguard.webhook.main import main
from tests.support.paths import REPO

ROOT = REPO

# A Helm-style stream: header comments, a non-workload, a GPU Job to fix (with comments, flow
# style, quoted strings and indented sequences), a document end marker and an empty document.
TRAIN_JOB = """\
# Source: trainer/templates/job.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: finetune   # the run name
  namespace: ml
  labels: {team: vision, "app.kubernetes.io/name": finetune}
  annotations:
    scheduling.volcano.sh/group-min-member: "2"   # Volcano gangs both workers
spec:
  # two workers at a time
  parallelism: 2
  completions: 2
  template:
    spec:
      restartPolicy: Never
      schedulerName: volcano
      containers:
        - name: trainer
          image: "ghcr.io/example/train:1.4"   # pinned
          command: ["python", "train.py", "--epochs", '3']
          env:
            - {name: CHECKPOINT_DIR, value: /checkpoints}
          resources:
            limits:
              nvidia.com/gpu: 1
              memory: 64Gi
          volumeMounts:
            - name: ckpt
              mountPath: /checkpoints
      volumes:
        - name: ckpt
          persistentVolumeClaim: {claimName: ckpt}
"""
CONFIGMAP = """\
---
# Source: trainer/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings   # not a workload: never touched
data:
  batch_size: "512"
  note: 'keep   my   spacing'
"""


def fix(*args: str) -> int:
    return main(["fix", *args])


def lines_in_order(original: str, fixed: str) -> bool:
    """Every line of ``original`` is in ``fixed``, in the same order (nothing changed or moved, only added)."""
    it = iter(fixed.splitlines())
    return all(any(line == other for other in it) for line in original.splitlines())


def mutation_left(text: str) -> list:
    """What the webhook would still change at apply time: the patch of every workload in ``text``."""
    engine = Engine(load_config(None))
    ops = []
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict):
            decision = engine.evaluate(doc, RequestContext(namespace="ml"))
            ops += [op for op in decision.patch if MUTATED_BY_ANNOTATION.replace("/", "~1") not in op["path"]
                    and op["path"] != "/metadata/annotations"]
    return ops


def test_commented_multi_document_file_keeps_every_unchanged_byte(tmp_path, capsys):
    already_fixed = tmp_path / "first.yaml"
    already_fixed.write_text(TRAIN_JOB)
    assert fix(str(already_fixed)) == 0
    compliant = "---\n" + already_fixed.read_text().replace("finetune", "finetune-2")
    text = "# rendered by helm template\n" + TRAIN_JOB + CONFIGMAP + compliant + "...\n---\n"
    path = tmp_path / "stack.yaml"
    path.write_text(text)

    assert fix(str(path)) == 0
    out = capsys.readouterr().out
    fixed = path.read_text()
    assert "fixed" in out and "Job ml/finetune" in out and "finetune-2" not in out
    # the config map, the compliant job and the stream's markers are byte for byte the same
    assert CONFIGMAP + compliant + "...\n---\n" in fixed
    # the changed job: every original line (comments, flow maps, quotes) still there, in order
    job_part = fixed.split(CONFIGMAP)[0]
    assert lines_in_order("# rendered by helm template\n" + TRAIN_JOB, job_part)
    assert "priorityClassName: training-standard" in job_part and "tolerations:" in job_part
    assert MUTATED_BY_ANNOTATION not in fixed
    # indented sequences stay indented; the added ones follow the same style
    assert "      tolerations:\n        - key: nvidia.com/gpu" in job_part
    # apply would change nothing now, and a second fix is a no-op
    assert mutation_left(fixed) == []
    assert fix(str(path)) == 0
    assert path.read_text() == fixed


def test_a_commented_multi_document_file_with_nothing_to_change_is_not_rewritten(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(TRAIN_JOB)
    assert fix(str(job)) == 0  # now compliant: the webhook would change nothing
    text = ("# rendered by kustomize build\n" + job.read_text() + CONFIGMAP + "---\n# trailing comment\n"
            ).encode()
    path = tmp_path / "stack.yaml"
    path.write_bytes(text)
    before = path.stat().st_mtime_ns
    assert fix(str(path)) == 0
    assert path.read_bytes() == text and path.stat().st_mtime_ns == before


def test_stdout_leaves_the_file_alone_and_reports_on_stderr(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(TRAIN_JOB)
    assert fix("--stdout", str(path)) == 0
    captured = capsys.readouterr()
    assert path.read_text() == TRAIN_JOB
    assert "tolerations:" in captured.out and "# the run name" in captured.out
    assert "fixed" in captured.err and "fixed" not in captured.out


def test_what_is_still_denied_is_printed_and_exits_1(tmp_path, capsys):
    path = tmp_path / "gang.yaml"
    path.write_text(TRAIN_JOB.replace("      schedulerName: volcano\n", ""))
    assert fix(str(path)) == 1
    out = capsys.readouterr().out
    assert "DENIED" in out and "[gang-scheduling]" in out
    assert "tolerations:" in path.read_text()  # the mutations are still applied


def test_custom_rules_denials_are_reported_too(tmp_path, capsys):
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\ncustomPolicies:\n"
                      "  - id: gpu-registry\n    validations:\n"
                      "      - expression: podSpec.containers.all(c, c.image.startsWith('registry.corp/'))\n"
                      "        message: images of GPU workloads come from registry.corp\n")
    path = tmp_path / "job.yaml"
    path.write_text(TRAIN_JOB)
    assert fix("--config", str(config), str(path)) == 1
    assert "[gpu-registry] spec.template.spec (job): images of GPU workloads come from registry.corp" in \
        capsys.readouterr().out


def test_kubectl_list_and_json_files(tmp_path):
    job = yaml.safe_load(TRAIN_JOB)
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [job]}, indent=4) + "\n")
    assert fix(str(listing)) == 0
    fixed = listing.read_text()
    assert fixed.startswith('{\n    "apiVersion"')  # still JSON, same indent
    item = json.loads(fixed)["items"][0]
    assert item["spec"]["template"]["spec"]["priorityClassName"] == "training-standard"
    assert mutation_left(json.dumps(item)) == []


def test_stdin_to_stdout(monkeypatch, capsys):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(TRAIN_JOB))
    assert fix("-") == 0
    assert "priorityClassName: training-standard" in capsys.readouterr().out


@pytest.mark.parametrize("content, words", [
    ("apiVersion: v1\nkind: [unclosed\n", "invalid YAML"),
    (None, "cannot read"),
])
def test_bad_files_are_one_error_line_and_exit_2(tmp_path, capsys, content, words):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    assert fix(str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuguard: error:") and words in err and "Traceback" not in err


def test_fix_keeps_kustomize_style_unindented_sequences(tmp_path):
    text = (ROOT / "tests/fixtures/manifests/multi/helm-template-stack.yaml").read_text()
    path = tmp_path / "helm.yaml"
    path.write_text(text)
    assert fix(str(path)) == 1  # the Job is still denied: gang scheduling needs a choice a tool cannot make
    fixed = path.read_text()
    assert lines_in_order(text, fixed)
    assert "      tolerations:\n      - key: nvidia.com/gpu" in fixed
    assert mutation_left(fixed) == []



def test_the_pre_commit_hook_runs_fix_on_the_staged_files():
    import shlex

    from gpuguard.webhook.main import build_parser

    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    args = build_parser().parse_args(shlex.split(hooks["gpuguard-fix"]["entry"])[1:] + ["k8s/job.yaml"])
    assert args.command == "fix" and args.files == ["k8s/job.yaml"] and not args.stdout


def test_typed_lists_are_fixed_item_by_item_with_the_lists_kind(tmp_path):
    """``kubectl get jobs -o yaml`` from the API: a ``JobList`` whose items omit apiVersion and kind."""
    job = yaml.safe_load(TRAIN_JOB)
    del job["apiVersion"], job["kind"]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "batch/v1", "kind": "JobList", "items": [job]}, sort_keys=False))
    assert fix(str(path)) == 0
    [item] = yaml.safe_load(path.read_text())["items"]
    assert item["spec"]["template"]["spec"]["priorityClassName"] == "training-standard"
    assert "kind" not in item  # the file keeps its items as written


def test_documents_split_where_the_manifest_reader_splits(tmp_path):
    """One marker rule for fix and the reader: "--- # comment", "..." and CRLF line endings."""
    from gpuguard.webhook.cli.fixer import split_documents
    from gpuguard.webhook.manifests import split_text

    text = "a: 1\r\n...\r\n--- # next\r\nb: 2\r\n---\r\nc: 3\r\n"
    assert split_documents(text) == ["a: 1\r\n", "...\r\n", "--- # next\r\nb: 2\r\n", "---\r\nc: 3\r\n"]
    assert "".join(split_documents(text)) == text
    assert [piece for piece, _line in split_text(text)] == ["a: 1\r\n...\r\n", "--- # next\r\nb: 2\r\n",
                                                            "---\r\nc: 3\r\n"]
    crlf = tmp_path / "crlf.yaml"
    crlf.write_bytes((CONFIGMAP.lstrip("-\n") + "---\n" + TRAIN_JOB).replace("\n", "\r\n").encode())
    assert fix(str(crlf)) == 0
    fixed = crlf.read_bytes().decode()
    assert fixed.startswith(CONFIGMAP.lstrip("-\n").replace("\n", "\r\n"))  # the ConfigMap, byte for byte
    assert "priorityClassName: training-standard" in fixed


def test_added_strings_read_back_as_strings_by_yaml_1_1_readers():
    """ruamel writes YAML 1.2, where ``on`` is a string; kubectl and PyYAML read ``on`` as true."""
    import io

    from gpuguard.webhook.cli.fixer import _round_trip, apply_patch

    editor = _round_trip(2, 2, 0)
    node = editor.load("metadata:\n  name: x\n")
    words = ["on", "yes", "off", "1e3", "0x1F", "null", "~", "2024-05-01", "plain"]
    apply_patch(node, [{"op": "add", "path": "/metadata/labels", "value": {"gpu": "on"}},
                       {"op": "add", "path": "/values", "value": words}])
    out = io.StringIO()
    editor.dump(node, out)
    assert yaml.safe_load(out.getvalue()) == {"metadata": {"name": "x", "labels": {"gpu": "on"}}, "values": words}
    assert "- plain\n" in out.getvalue()  # only what needs quotes is quoted
