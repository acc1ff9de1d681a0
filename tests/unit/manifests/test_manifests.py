"""Reading manifests for the audit: streams, Lists, JSON, broken documents, folders and stdin."""

from __future__ import annotations

import io
from pathlib import Path

from gpuguard.webhook.manifests import (
    INVALID_JSON,
    INVALID_YAML,
    NOT_KUBERNETES,
    UNREADABLE,
    ManifestError,
    iter_paths,
    load,
    parse_text,
    parse_values,
    read_text,
    split_text,
)
from tests.support.paths import REPO

MANIFESTS = REPO / "tests" / "fixtures" / "manifests"

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
spec:
  template:
    spec:
      containers:
      - name: train
        resources:
          limits:
            nvidia.com/gpu: 1
"""


def test_multi_document_stream_keeps_each_start_line() -> None:
    text = "# leading comment\n" + JOB.format(name="a") + "---\n---\n# Source: chart/x.yaml\n" + JOB.format(name="b")
    docs = list(parse_text(text, "f.yaml"))
    assert [(d.index, d.line, d.obj["metadata"]["name"]) for d in docs] == [(0, 2, "a"), (1, 17, "b")]
    assert all(d.error is None for d in docs)


def test_field_lines_for_findings() -> None:
    doc = next(parse_text("---\n" + JOB.format(name="a"), "f.yaml"))
    assert doc.line_of("spec.template.spec.containers[0]") == 10
    assert doc.line_of("spec.template.spec.containers[0].resources.limits.nvidia.com/gpu") == 13
    assert doc.line_of("spec.template.spec.volumes[3]") == 8  # longest existing prefix
    assert doc.line_of(None) == 2


def test_broken_document_is_reported_and_the_others_survive() -> None:
    text = JOB.format(name="a") + "---\nkind: Job\nmetadata:\n  name: x\n   bad: indent\n---\n" + JOB.format(name="c")
    docs = list(parse_text(text, "f.yaml"))
    assert [d.obj["metadata"]["name"] if d.obj else d.error.kind for d in docs] == ["a", INVALID_YAML, "c"]
    broken = docs[1]
    assert broken.line == 17 and broken.column and "invalid YAML" in broken.error.message
    assert docs[2].line == 19 and docs[2].index == 2


def test_kind_list_and_typed_list_items() -> None:
    text = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: p}
- name: not-an-object
"""
    docs = list(parse_text(text, "l.yaml"))
    assert (docs[0].obj["kind"], docs[0].item, docs[0].line) == ("Pod", 0, 4)
    assert docs[1].error.kind == NOT_KUBERNETES and docs[1].item == 1 and docs[1].line == 7
    typed = '{"apiVersion": "batch/v1", "kind": "JobList", "items": [{"metadata": {"name": "j"}}]}'
    (job,) = parse_text(typed, "-")
    assert (job.obj["apiVersion"], job.obj["kind"]) == ("batch/v1", "Job")


def test_json_uses_json_rules() -> None:
    (ok,) = parse_text('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a\\/b"}}', "p.json")
    assert ok.obj["metadata"]["name"] == "a/b"
    (bad,) = parse_text('{"apiVersion": "v1",\n "kind": "Pod", "x": }', "p.json")
    assert bad.error.kind == INVALID_JSON and bad.line == 2


def test_yaml_timestamps_stay_strings_as_in_kubectl() -> None:
    (doc,) = parse_text("apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    since: 2024-05-01\n", "t.yaml")
    assert doc.obj["metadata"]["annotations"]["since"] == "2024-05-01"


def test_not_kubernetes_documents() -> None:
    kinds = [d.error.message for d in parse_text("replicaCount: 2\n---\njust a string\n---\n- 1\n", "v.yaml")]
    assert kinds[0] == "not a Kubernetes object: no apiVersion or kind"
    assert "string" in kinds[1] and "number" in kinds[2]


def test_folders_are_walked_recursively_and_sorted(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    for name in ("b/job.yaml", "a.yml", "c.json", "README.md", ".git/x.yaml", "b/values.yaml"):
        (tmp_path / name).write_text(JOB.format(name="x"))
    found = [Path(p).relative_to(tmp_path).as_posix() for p in iter_paths([str(tmp_path)], exclude=["values.yaml"])]
    assert found == ["a.yml", "c.json", "b/job.yaml"]


def test_stdin_and_unreadable_paths(tmp_path: Path) -> None:
    stdin = io.BytesIO(JOB.format(name="piped").encode())
    docs = list(load(["-", str(tmp_path / "missing.yaml")], stdin=stdin))
    assert docs[0].source == "<stdin>" and docs[0].obj["metadata"]["name"] == "piped"
    assert docs[1].error.kind == UNREADABLE
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    (doc,) = load([str(binary)])
    assert doc.error.kind == UNREADABLE


def test_fixture_folder_loads_every_file() -> None:
    docs = list(load([str(MANIFESTS)]))
    sources = {Path(d.source).name for d in docs}
    assert {"helm-template-stack.yaml", "kubectl-get-list.yaml", "triton-deployment.json", "broken-stream.yaml",
            "values.yaml", "truncated.json"} <= sources
    assert sum(1 for d in docs if d.error) == 3


def test_parse_values_reads_like_parse_text_without_object_checks() -> None:
    """For files that are not manifests (a fixture's expect.yaml): no kind needed, Lists kept whole."""
    assert parse_values("allowed: true\n---\n---\nwhen: 2024-05-01T10:00:00Z\n", "expect.yaml") == [
        {"allowed": True}, {"when": "2024-05-01T10:00:00Z"}]  # timestamps stay strings, as kubectl sends them
    listing = {"apiVersion": "v1", "kind": "List", "items": []}
    assert parse_values('{"apiVersion": "v1", "kind": "List", "items": []}', "list.yaml") == [listing]
    assert parse_values("", "empty.yaml") == []


def test_parse_values_raises_with_the_line_of_the_problem() -> None:
    try:
        parse_values("a: 1\n---\nb: [unclosed\n", "bad.yaml")
    except ManifestError as exc:
        assert exc.error.kind == INVALID_YAML and exc.line == 4 and str(exc).startswith("bad.yaml:4: invalid YAML")
    else:
        raise AssertionError("no ManifestError")
    try:
        parse_values("{nope", "bad.json")
    except ManifestError as exc:
        assert exc.error.kind == INVALID_JSON and exc.line == 1
    else:
        raise AssertionError("no ManifestError")


def test_read_text_drops_a_byte_order_mark_and_says_what_is_unreadable(tmp_path: Path) -> None:
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_text(str(bom)) == (str(bom), "a: 1\n")
    assert read_text("-", io.BytesIO(b"b: 2\n")) == ("<stdin>", "b: 2\n")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    for path in (latin, tmp_path / "missing.yaml"):
        try:
            read_text(str(path))
        except ManifestError as exc:
            assert exc.error.kind == UNREADABLE and exc.source == str(path)
        else:
            raise AssertionError(f"{path} read")


def test_split_text_cuts_before_document_starts_and_keeps_every_byte() -> None:
    text = "# head\na: 1\n...\n--- # two\nb: 2\n---\tc: 3\n----\n"
    pieces = split_text(text)
    assert "".join(piece for piece, _line in pieces) == text
    assert pieces == [("# head\na: 1\n...\n", 1), ("--- # two\nb: 2\n", 4), ("---\tc: 3\n----\n", 6)]
    assert [line for _piece, line in split_text(text, at_end_markers=True)] == [1, 3, 4, 6]
