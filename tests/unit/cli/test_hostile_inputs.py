"""Hostile manifest files end in a clear error naming the file and exit 2, in every verb that reads them.

Each verb runs as a real process: an alias bomb once crashed ``fix`` with a segfault and a FIFO
hung ``audit``, which only a process boundary shows.  The FIFO is never written to, so a reader
that opened it would block until the subprocess timeout and fail the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from gpuguard.webhook.manifests import MAX_FILE_BYTES
from tests.support.hostile import BOMB
from tests.support.paths import REPO

KINDS = ("alias-bomb", "fifo", "symlink-to-fifo", "char-device", "symlink-to-dev-zero", "oversize")
EXPECTED = {
    "alias-bomb": "YAML aliases expand this document beyond",
    "fifo": "not a regular file (a FIFO)",
    "symlink-to-fifo": "not a regular file (a FIFO)",
    "char-device": "not a regular file (a character device)",
    "symlink-to-dev-zero": "not a regular file (a character device)",
    "oversize": "larger than 64 MiB",
}


def hostile(kind: str, folder: Path, name: str = "hostile.yaml") -> str:
    """A path to a hostile input of ``kind`` (``/dev/zero`` itself for the character device)."""
    path = folder / name
    if kind == "alias-bomb":
        path.write_text(BOMB)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-to-fifo":
        os.mkfifo(folder / "the-fifo")
        path.symlink_to(folder / "the-fifo")
    elif kind == "char-device":
        return "/dev/zero"
    elif kind == "symlink-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "oversize":
        with open(path, "wb") as handle:  # sparse: no disk or memory spent
            handle.truncate(MAX_FILE_BYTES + 1)
    return str(path)


def gpuguard(*args: str) -> subprocess.CompletedProcess[str]:
    # The timeout only keeps a regression from hanging the suite; a hang fails the test.
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)


def test_the_bomb_is_small_and_expands_beyond_the_budget():
    assert len(BOMB) < 600
    assert BOMB.count("*a") == 8 * 9


@pytest.mark.parametrize("kind", KINDS)
def test_evaluate_refuses_hostile_input(kind, tmp_path):
    path = hostile(kind, tmp_path)
    proc = gpuguard("evaluate", path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"gpuguard: error: {path}")
    assert EXPECTED[kind] in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_audit_reports_hostile_input_as_an_input_error(kind, tmp_path):
    path = hostile(kind, tmp_path)
    proc = gpuguard("audit", path, "--format", "json")
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    jsonschema.validate(report, json.loads((REPO / "docs" / "audit-result.schema.json").read_text()))
    assert report["summary"]["inputErrors"] == 1
    assert path in proc.stdout and EXPECTED[kind] in proc.stdout


def test_audit_of_a_folder_holding_a_fifo_reports_it_and_reads_the_rest(tmp_path):
    hostile("fifo", tmp_path, "pipe.yaml")
    (tmp_path / "ok.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n")
    proc = gpuguard("audit", str(tmp_path), "--format", "json")
    assert proc.returncode == 2, proc.stderr
    assert "pipe.yaml" in proc.stdout and "not a regular file (a FIFO)" in proc.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_fix_refuses_hostile_input_without_crashing(kind, tmp_path):
    path = hostile(kind, tmp_path)
    proc = gpuguard("fix", path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)  # a segfault is -11
    assert proc.stderr.startswith(f"gpuguard: error: {path}")
    assert EXPECTED[kind] in proc.stderr
    if kind == "alias-bomb":
        assert Path(path).read_text() == BOMB  # untouched


@pytest.mark.parametrize("kind", KINDS)
def test_test_verb_refuses_a_hostile_case_input(kind, tmp_path):
    case = tmp_path / "suite" / "case"
    case.mkdir(parents=True)
    (case / "expect.yaml").write_text("allowed: true\n")
    if kind == "char-device":
        (case / "input.yaml").symlink_to("/dev/zero")
    else:
        hostile(kind, case, "input.yaml")
    proc = gpuguard("test", str(tmp_path / "suite"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "gpuguard: error:" in proc.stderr and "input.yaml" in proc.stderr
    assert EXPECTED[kind] in proc.stderr
