"""The import-linter contracts (``pyproject.toml``) cover every module they are meant to.

``lint-imports`` (run by ``scripts/test.sh``) checks the contracts; these tests check that
nothing escapes them: a new policy module left out of the "policies never import each
other" layer, or a new top-level package left out of the root packages, would be unchecked.
"""

from __future__ import annotations

import pkgutil
import tomllib

from gpuguard import policies
from tests.support.paths import REPO

ROOT = REPO
LINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def _contract(name_start: str) -> dict:
    return next(c for c in LINTER["contracts"] if c["name"].startswith(name_start))


def test_every_policy_module_is_in_the_policy_layer_contract():
    contract = _contract("Policies use the policy contract")
    listed = {m.strip() for layer in contract["layers"] for m in layer.split("|")}
    modules = {m.name for m in pkgutil.iter_modules(policies.__path__)}
    assert modules == listed, (f"add {sorted(modules - listed)} to the policies layer contract in pyproject.toml"
                               if modules - listed else f"{sorted(listed - modules)} no longer exist")
    assert {p.run.__module__.rsplit(".", 1)[1] for p in policies.REGISTRY.values()} <= modules


def test_every_shipped_package_is_a_root_package_of_the_contracts():
    shipped = {p.rstrip("*") for p in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]}
    assert shipped == set(LINTER["root_packages"])
