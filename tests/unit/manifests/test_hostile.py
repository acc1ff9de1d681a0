"""The one manifest reader refuses what it must not read: special files, oversize files, alias bombs.

A FIFO here is never written to: a reader that opened it for reading would block forever, so
these tests finishing is part of what they check.
"""

from __future__ import annotations

import io
import os

import pytest

from gpuguard.webhook.manifests import (
    INVALID_YAML,
    MAX_ALIAS_NODES,
    MAX_FILE_BYTES,
    TOO_LARGE,
    UNREADABLE,
    ManifestError,
    load,
    parse_text,
    parse_values,
    read_text,
)
from tests.support.hostile import BOMB

CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"


def unreadable(path: str) -> str:
    with pytest.raises(ManifestError) as caught:
        read_text(path)
    assert caught.value.error.kind == UNREADABLE
    assert caught.value.source == path
    return caught.value.error.message


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file (a FIFO)" in unreadable(str(fifo))


def test_a_symlink_to_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "pipe")
    assert "not a regular file (a FIFO)" in unreadable(str(tmp_path / "link.yaml"))


def test_character_devices_and_symlinks_to_them_are_refused(tmp_path):
    assert "a character device" in unreadable("/dev/zero")
    (tmp_path / "zero.yaml").symlink_to("/dev/zero")
    assert "a character device" in unreadable(str(tmp_path / "zero.yaml"))


def test_a_file_over_the_limit_is_refused_unread(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)
    assert "larger than 64 MiB" in unreadable(str(big))
    exact = tmp_path / "exact.yaml"
    exact.write_bytes(CONFIG_MAP.encode() + b"#" * (MAX_FILE_BYTES - len(CONFIG_MAP)))
    assert read_text(str(exact))[1].startswith(CONFIG_MAP)  # the limit itself is allowed


def test_stdin_over_the_limit_is_refused():
    with pytest.raises(ManifestError) as caught:
        read_text("-", io.BytesIO(b"#" * (MAX_FILE_BYTES + 1)))
    assert "larger than 64 MiB" in caught.value.error.message


def test_load_turns_special_files_into_error_documents_and_reads_the_rest(tmp_path):
    os.mkfifo(tmp_path / "a-pipe.yaml")
    (tmp_path / "b.yaml").write_text(CONFIG_MAP)
    docs = list(load([str(tmp_path)]))
    assert [(d.source.endswith("a-pipe.yaml"), d.error is not None) for d in docs] == [(True, True), (False, False)]


def test_an_alias_bomb_is_one_too_large_document_and_the_others_are_read():
    docs = list(parse_text(CONFIG_MAP + "---\n" + BOMB + "---\n" + CONFIG_MAP, "f.yaml"))
    assert [d.error.kind if d.error else None for d in docs] == [None, TOO_LARGE, None]
    bomb = docs[1]
    assert bomb.source == "f.yaml" and bomb.line is not None and bomb.line > 4
    assert f"plus {MAX_ALIAS_NODES}" in bomb.error.message


def test_a_recursive_alias_is_refused():
    docs = list(parse_text(CONFIG_MAP + "data: &a {x: [*a]}\n", "f.yaml"))
    assert docs[0].error is not None and docs[0].error.kind in (TOO_LARGE, INVALID_YAML)


def test_aliases_that_repeat_a_block_are_read():
    text = CONFIG_MAP + "data:\n  a: &env {k: v, w: x}\n  b: *env\n  c: *env\n"
    (doc,) = parse_text(text, "f.yaml")
    assert doc.error is None and doc.obj["data"]["c"] == {"k": "v", "w": "x"}


def test_parse_values_refuses_a_bomb_as_too_large():
    with pytest.raises(ManifestError) as caught:
        parse_values(BOMB, "expect.yaml")
    assert caught.value.error.kind == TOO_LARGE and caught.value.line is not None
