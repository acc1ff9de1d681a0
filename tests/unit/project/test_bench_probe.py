"""The apiserver benchmarks' objects, judged by gpuguard's engine: what they time is admitted, their probe denied.

Why tested: ``bench/apiserver.py`` (and ``--peers``) proves gpuguard is in force by creating a GPU workload without
checkpoint storage and waiting for the denial.  When the class model stopped denying a bare Pod judged training
only by its look (it warns), the probe was never denied again and both benchmarks timed out "waiting for gpuguard in
force" -- unseen, since nothing in the test command starts a control plane for them (issue 38).  The engine is what
answers in the benchmark, so it is held to both answers here, with the config the benchmark serves (the default).
"""

from __future__ import annotations

import importlib

import pytest

from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.engine.core import Engine
from tests.support.paths import REPO

ENGINE = Engine(load_config(None))


@pytest.fixture(scope="module")
def bench():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "bench"))
        yield importlib.import_module("apiserver")


@pytest.fixture(scope="module")
def peers(bench):
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "bench"))
        yield importlib.import_module("peers.apiserver_peers")


def _judged(obj: dict) -> bool:
    """Whether the webhook's two calls (mutate, then validate the mutated object) admit ``obj``."""
    ctx = RequestContext(operation="CREATE", namespace="bench-probe")
    mutated = ENGINE.evaluate(obj, ctx)
    if not mutated.allowed or mutated.denials:
        return False
    final = ENGINE.evaluate(mutated.mutated if isinstance(mutated.mutated, dict) else obj, ctx)
    return final.allowed and not final.denials


def test_the_in_force_probe_is_denied(bench) -> None:
    assert not _judged(bench.manifest(bench.PROBE, "probe", checkpoint=False))


@pytest.mark.parametrize("kind", ["pod", "job", "cpu-pod"])
def test_every_timed_create_is_admitted(bench, kind: str) -> None:
    assert _judged(bench.manifest(kind, "timed"))


def test_every_peer_benchmark_create_is_admitted(peers) -> None:
    """``--peers`` times one create per kind in every scenario; a denied one would time gpuguard's refusal."""
    for kind in peers.KINDS:
        assert _judged(peers.peer_manifest(kind, "timed")), kind
