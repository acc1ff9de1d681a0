"""The docs' command examples are what gpuguard really does.

Every ``gpuguard`` command shown in README.md and docs/ that runs offline is run from a scratch
folder holding copies of the repository files it names: a ```` ```console ```` block's output must
match what the docs show (``…`` for what they leave out) and its ``$ echo $?`` the exit code; a
command in a ```` ```sh ```` block must at least run (no usage error, no traceback).  Commands that
cannot run here say why on a ``<!-- docs-test: skip … -->`` line, so a typo in a path cannot skip
a command silently.  Findings quoted in prose (``[policy] path: message; fix``) must be findings
gpuguard gives on the fixtures, so samples cannot stay shorter or older than the real messages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from gpuguard.webhook import suite
from gpuguard.webhook.catalog import load_catalog
from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.exitcodes import ExitCode
from gpuguard.webhook.manifests import parse_text
from tests.support.docs_examples import Block, Command, blocks, doc_files, finding_samples, output_matches
from tests.support.paths import REPO

ALL_BLOCKS: list[Block] = [b for doc in doc_files() for b in blocks(doc)]
COMMANDS: list[tuple[Block, Command]] = [(b, c) for b in ALL_BLOCKS for c in b.commands()]
RUNNABLE = [(b, c) for b, c in COMMANDS if b.skip_reason is None and c.why_not_runnable() is None]
# Where each finding sample may come from: the policy fixtures, the worked suite, the kinds' fixtures.
MESSAGE_SOURCES = ("tests/policies", "examples/policy-suite", "tests/kinds")


def _run(command: Command, scratch: Path) -> subprocess.CompletedProcess[str]:
    for relative in command.repo_paths():
        source, target = REPO / relative, scratch / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copy2(source, target)
    words = command.argv() or []
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb", "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *words[1:]], cwd=scratch, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("block", "command"), RUNNABLE, ids=[c.where for _, c in RUNNABLE])
def test_a_documented_command_prints_what_the_docs_show(block: Block, command: Command, tmp_path: Path):
    result = _run(command, tmp_path)
    printed = (result.stdout + result.stderr).splitlines()
    assert "Traceback" not in result.stderr, f"{command.where}: `{command.text}` crashed:\n{result.stderr}"
    assert result.returncode != ExitCode.USAGE, (
        f"{command.where}: `{command.text}` is a usage error now:\n{result.stderr}")
    if block.info == "console":
        assert output_matches(command.expected, printed), (
            f"{command.where}: `{command.text}` prints something else than the docs show.\n"
            "--- the docs show:\n" + "\n".join(command.expected) + "\n--- it prints:\n" + "\n".join(printed))
    if command.exit_code is not None:
        assert result.returncode == command.exit_code, f"{command.where}: exit code {result.returncode}"


def test_the_docs_run_enough_examples_for_this_test_to_mean_something():
    console = [c for b, c in RUNNABLE if b.info == "console"]
    assert len(console) >= 5, [c.where for c in console]
    assert len(RUNNABLE) >= 10, [c.where for _, c in RUNNABLE]


def test_a_gpuguard_command_that_does_not_run_says_why():
    unmarked = [f"{c.where}: `{c.text}` ({c.why_not_runnable()})" for b, c in COMMANDS
                if b.skip_reason is None and c.why_not_runnable() is not None
                and (c.argv() or [""])[0] == "gpuguard"]
    assert not unmarked, ("gpuguard commands in the docs that cannot run offline and are not marked "
                          "<!-- docs-test: skip REASON -->:\n" + "\n".join(unmarked))


@cache
def _real_findings() -> tuple[str, ...]:
    """Every finding and change the fixtures and the shipped examples give, as users read it (an inline code span in
    Markdown cannot hold the backticks a message puts around a command, so they are dropped)."""
    texts: set[str] = set()
    for case in suite.discover([REPO / path for path in MESSAGE_SOURCES]):
        decision = suite.run_case(case).decision
        if decision is not None:
            texts.update(v.text for v in decision.violations)
            texts.update(c.text for c in decision.changes)
    engine = Engine(load_config(None))
    for example in sorted((REPO / "examples").glob("*.yaml")):
        for document in parse_text(example.read_text(), str(example)):
            if document.obj is None:
                continue
            decision = engine.evaluate(document.obj, RequestContext(operation="CREATE", namespace="default"))
            texts.update(v.text for v in decision.violations)
            texts.update(c.text for c in decision.changes)
    return tuple(sorted(text.replace("`", "") for text in texts))


SAMPLES = [s for doc in doc_files() for s in finding_samples(doc, frozenset(load_catalog()))]


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.where for s in SAMPLES])
def test_a_finding_quoted_in_the_docs_is_one_gpuguard_gives(sample):
    pattern = sample.pattern()
    assert any(pattern.fullmatch(text) for text in _real_findings()), (
        f"{sample.where}: no fixture gives the finding the docs quote:\n  {sample.text}\n"
        "quote a real one (end it with … to shorten it), or add the case to tests/policies/")


def test_the_output_matcher_reads_ellipses_as_the_docs_mean_them():
    assert output_matches(["a", "…", "z"], ["a", "b", "c", "z"])
    assert output_matches(["a", "…", "z"], ["a", "z"])
    assert output_matches(["DENY  [x] spec: …"], ["DENY  [x] spec: no volume"])
    assert not output_matches(["a", "z"], ["a", "b", "z"])
    assert not output_matches(["a"], ["a", "b"])
    assert not output_matches(["DENY  [x] spec: …"], ["WARN  [x] spec: no volume"])
