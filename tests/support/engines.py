"""Engines the unit tests share: shared test code lives in ``tests/support``, never in a test module.

``only(policy)`` builds an engine with one policy on, ``engine_with`` one from config text,
``evaluate_twice`` evaluates and proves the patch applies (with ``jsonpatch``) and the
mutation is idempotent.  The workload builders for every kind are in ``builders.py``; that no
test module imports another is checked by ``tests/unit/project/test_layers.py``.
"""

from __future__ import annotations

import copy

import jsonpatch

from gpuguard.policies import REGISTRY
from gpuguard.webhook.config import parse_config_text
from gpuguard.webhook.decision import Decision
from gpuguard.webhook.engine.core import Engine

BASE = "kind: GpuguardConfig\n"


def engine_with(policies_yaml: str = "", extra: str = "") -> Engine:
    return Engine(parse_config_text(BASE + extra + ("policies:\n" + policies_yaml if policies_yaml else "")))


def only(policy: str, settings: str = "") -> Engine:
    """An engine where every policy but ``policy`` is off, to test one policy alone."""
    lines = [f"  {pid}: {{action: off}}" for pid in REGISTRY if pid != policy]
    lines.append(f"  {policy}: {{action: enforce{', ' + settings if settings else ''}}}")
    return engine_with("\n".join(lines) + "\n")


def assert_patch_yields_mutated(decision: Decision) -> None:
    """The JSON patch applies to the original (jsonpatch library) and gives exactly the mutated object."""
    patched = jsonpatch.apply_patch(copy.deepcopy(decision.original), decision.patch)
    assert patched == decision.mutated


def evaluate_twice(engine: Engine, obj: dict) -> Decision:
    first = engine.evaluate(obj)
    assert_patch_yields_mutated(first)
    second = engine.evaluate(first.mutated)
    assert second.patch == [], "mutation must be idempotent"
    return first
