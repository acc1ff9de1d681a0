"""A multi-document file is read one document at a time, with every guard of the whole-file reader.

``gpuguard audit`` reads a 60 MB ``helm template`` dump; holding every document's node tree and
value before handing out the first one took gigabytes.  These tests count the documents
constructed when the first one is handed out, and check that a broken document met after others
were handed out costs only itself (no document twice, none lost, indexes consecutive).
"""

from __future__ import annotations

import itertools

import pytest

from gpuguard.webhook import manifests
from gpuguard.webhook.manifests import INVALID_YAML, TOO_LARGE, StdinText, load, may_hold, parse_text
from tests.support.hostile import BOMB

JOB = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec: {{}}\n"


def stream(count: int) -> str:
    return "".join("---\n" + JOB.format(name=f"job-{i}") for i in range(count))


@pytest.fixture
def constructed(monkeypatch) -> list[int]:
    """How many documents the YAML loader has constructed so far (one entry per document)."""
    calls: list[int] = []
    original = manifests._Loader.construct_document

    def counting(self, node):
        calls.append(1)
        return original(self, node)

    monkeypatch.setattr(manifests._Loader, "construct_document", counting)
    return calls


def test_the_first_document_comes_before_the_rest_is_read(constructed: list[int]) -> None:
    docs = parse_text(stream(1000), "big.yaml")
    first = next(docs)
    assert first.obj is not None and first.obj["metadata"]["name"] == "job-0"
    assert len(constructed) == 1
    assert [d.obj["metadata"]["name"] for d in itertools.islice(docs, 2)] == ["job-1", "job-2"]
    assert len(constructed) == 3


def test_load_reads_a_big_file_lazily(tmp_path, constructed: list[int]) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(stream(2000))
    docs = load([str(path)])
    assert next(docs).index == 0
    assert len(constructed) == 1
    assert sum(1 for _ in docs) == 1999


def test_a_broken_document_after_good_ones_costs_only_itself() -> None:
    text = stream(3) + "---\nbroken: [\n" + stream(2).replace("job-", "late-")
    docs = list(parse_text(text, "f.yaml"))
    assert [d.index for d in docs] == [0, 1, 2, 3, 4, 5]
    names = [d.obj["metadata"]["name"] if d.obj else None for d in docs]
    assert names == ["job-0", "job-1", "job-2", None, "late-0", "late-1"]
    assert docs[3].error is not None and docs[3].error.kind == INVALID_YAML
    assert docs[3].line == 21  # the "---" after "broken: [" (line 20) cuts the flow sequence off
    assert [d.line for d in docs if d.obj] == [2, 8, 14, 22, 28]


def test_a_directive_before_a_broken_document_hands_nothing_out_twice() -> None:
    text = "%YAML 1.1\n---\n" + JOB.format(name="a") + "---\nb: [\n---\n" + JOB.format(name="c")
    docs = list(parse_text(text, "f.yaml"))
    assert [d.obj["metadata"]["name"] if d.obj else d.error.kind for d in docs] == ["a", INVALID_YAML, "c"]
    assert [d.index for d in docs] == [0, 1, 2]


def test_an_alias_bomb_in_the_middle_of_a_stream_is_refused_alone(constructed: list[int]) -> None:
    text = stream(2) + "---\n" + BOMB + stream(2).replace("job-", "after-")
    docs = parse_text(text, "f.yaml")
    assert next(docs).obj is not None
    assert len(constructed) == 1  # nothing after the first document read yet
    rest = list(docs)
    kinds = [d.error.kind if d.error else d.obj["metadata"]["name"] for d in rest]
    assert kinds == ["job-1", TOO_LARGE, "after-0", "after-1"]
    assert [d.index for d in rest] == [1, 2, 3, 4]


def test_a_list_in_a_stream_keeps_its_items_and_lines() -> None:
    listing = ("apiVersion: v1\nkind: List\nitems:\n- " + JOB.format(name="in-list").replace("\n", "\n  ").rstrip()
               + "\n")
    docs = list(parse_text(JOB.format(name="a") + "---\n" + listing + "---\nbad: {\n", "f.yaml"))
    assert [(d.index, d.item, d.line) for d in docs] == [(0, None, 1), (1, 0, 10), (2, None, 17)]


def test_may_hold_is_never_wrong_when_it_says_no() -> None:
    assert may_hold("kind: ClusterTrainingRuntime", ("TrainingRuntime",))
    assert may_hold('{"kind": "ClusterTraining\\u0052untime"}', ("TrainingRuntime",))  # an escape could spell it
    assert not may_hold("kind: Job\n", ("TrainingRuntime", "ResourceClaim"))


def test_stdin_is_read_once_for_two_passes(tmp_path) -> None:
    import io

    stdin = StdinText(io.BytesIO(stream(3).encode()))
    first = [d.obj["metadata"]["name"] for d in load(["-"], stdin=stdin)]
    again = [d.obj["metadata"]["name"] for d in load(["-"], stdin=stdin)]
    assert first == again == ["job-0", "job-1", "job-2"]
    skipped = list(load(["-"], stdin=stdin, only_if=("TrainingRuntime",)))
    assert skipped == []
