"""The import-linter contracts (``pyproject.toml``) cover every module of the distribution.

``lint-imports`` (run by ``scripts/test.sh``) checks the contracts; these tests check that
nothing escapes them.  A module that sits in no layer of any layers contract is never checked
(a new server module could import the CLI, a new policy another policy), so every module must
be named by a layer — itself or a package above it — and every shipped package must be a root
of the contracts.  Test modules are held to their own rule: none imports another (helpers live
in ``tests/support``).
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import pkgutil
import tomllib

from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
LINTER = PYPROJECT["tool"]["importlinter"]
SHIPPED = PYPROJECT["tool"]["setuptools"]["package-dir"]


def _layer_names() -> list[str]:
    """Every module pattern a layers contract names, with its container prefixed, and every module
    an independence contract keeps apart (``gpuguard.policies.*``: each policy module)."""
    names: list[str] = []
    for contract in LINTER["contracts"]:
        if contract["type"] == "independence":
            names.extend(contract["modules"])
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers") or [""]
        for layer in contract["layers"]:
            for part in layer.replace(":", "|").split("|"):
                part = part.strip().strip("()")
                if part:
                    names.extend(f"{c}.{part}" if c else part for c in containers)
    return names


def _containers() -> set[str]:
    return {c for contract in LINTER["contracts"] for c in contract.get("containers", [])}


def _all_modules() -> list[str]:
    modules: list[str] = []
    for package in SHIPPED:
        modules.append(package)
        root = importlib.import_module(package)
        modules.extend(info.name for info in pkgutil.walk_packages(root.__path__, package + ".")
                       if not info.name.endswith(".__main__") or info.name == "gpuguard.webhook.__main__")
    return modules


def _covered(module: str, patterns: list[str], containers: set[str]) -> bool:
    if module in SHIPPED or module in containers:
        return True  # a root or a container: its modules are what the layers order
    return any(module == p or module.startswith(p + ".") or fnmatch.fnmatchcase(module, p)
               or fnmatch.fnmatchcase(module, p + ".*") for p in patterns)


def test_every_module_sits_in_a_layer_of_some_contract() -> None:
    patterns, containers = _layer_names(), _containers()
    loose = [m for m in _all_modules() if not _covered(m, patterns, containers)]
    assert not loose, f"put these modules in a layer of a contract in pyproject.toml: {loose}"


def test_every_shipped_package_is_a_root_package_of_the_contracts() -> None:
    assert set(SHIPPED) == set(LINTER["root_packages"])


def test_every_policy_module_is_in_the_policy_independence_contract() -> None:
    from gpuguard import policies

    contract = next(c for c in LINTER["contracts"] if c["type"] == "independence"
                    and "gpuguard.policies.*" in c["modules"])
    patterns = contract["modules"]
    modules = {f"gpuguard.policies.{m.name}" for m in pkgutil.iter_modules(policies.__path__)}
    for policy in policies.REGISTRY.values():
        module = policy.run.__module__
        assert module in modules and any(fnmatch.fnmatchcase(module, p) for p in patterns), module


def _test_modules() -> list:
    return sorted(p for p in (REPO / "tests").rglob("*.py")
                  if p.name.startswith("test_") or p.name == "conftest.py")


def _imported_modules(tree: ast.Module) -> list[str]:
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append("." * node.level + node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def test_no_test_module_imports_another() -> None:
    offenders = []
    for path in _test_modules():
        for name in _imported_modules(ast.parse(path.read_text(), str(path))):
            last = name.rsplit(".", 1)[-1]
            if name.startswith(".") or (name.startswith("tests.") and (last.startswith("test_") or last == "conftest")):
                offenders.append(f"{path.relative_to(REPO)} imports {name}")
    assert not offenders, "move shared helpers to tests/support: " + "; ".join(offenders)


def test_shipped_code_imports_only_the_gpuguard_namespace() -> None:
    """``import policies`` would import a user's own package of that name: every import is absolute under gpuguard."""
    bare = {name.split(".", 1)[1] for name in SHIPPED}  # webhook, policies, workloads, certs, kubeapi
    offenders = []
    for folder in SHIPPED.values():
        for path in sorted((REPO / folder).rglob("*.py")):
            for name in _imported_modules(ast.parse(path.read_text(), str(path))):
                if name.split(".", 1)[0] in bare:
                    offenders.append(f"{path.relative_to(REPO)}: {name}")
    assert not offenders, offenders
