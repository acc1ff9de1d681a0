"""The CLI comparison's generated corpus (bench/peers/corpus.py): reproducible, mixed, and with real findings.

Why tested: the gpuguard-vs-Kyverno CLI figures are only comparable across runs and machines if
the corpus is the same for the same seed, and only meaningful if it holds every kind in the mix
and workloads that both pass and fail the policies.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import yaml

from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine
from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "bench"))

from peers import corpus  # noqa: E402


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    a = corpus.generate(tmp_path / "a", 60, seed=1)
    b = corpus.generate(tmp_path / "b", 60, seed=1)
    c = corpus.generate(tmp_path / "c", 60, seed=2)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


def test_every_file_is_one_object_and_every_kind_of_the_mix_appears(tmp_path: Path) -> None:
    paths = corpus.generate(tmp_path, 400)
    assert len(paths) == 400 and len(set(paths)) == 400
    kinds: Counter[str] = Counter()
    for path in paths:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert len(docs) == 1 and docs[0]["apiVersion"] and docs[0]["metadata"]["name"]
        kinds[docs[0]["kind"]] += 1
    assert set(kinds) == set(corpus.MIX)


def test_the_corpus_holds_admitted_and_denied_gpu_workloads(tmp_path: Path) -> None:
    engine = Engine(load_config())
    denied: Counter[str] = Counter()
    allowed = 0
    for path in corpus.generate(tmp_path, 300):
        decision = engine.evaluate(yaml.safe_load(path.read_text()))
        if decision.allowed:
            allowed += 1
        for v in decision.violations:
            if v.verdict == "deny":
                denied[v.policy] += 1
    assert allowed > 150
    assert denied["checkpoint-volume"] > 0 and denied["gpu-request-shape"] > 0
