"""The distribution installs one import name, ``gpuguard``, and nothing generic.

Why: a wheel that installs top-level ``policies``, ``certs`` or ``webhook`` packages collides
with any user's package of the same name (a repository with its own ``policies/`` on
``sys.path`` made ``gpuguard policies`` die with an ImportError).  The repository keeps its
top-level folders; ``pyproject.toml`` maps each under the ``gpuguard`` namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGE_DIRS: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (the build leaves nothing in the repository)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", *PACKAGE_DIRS.values()):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(out), str(src)], check=True, capture_output=True, text=True)
    (built,) = out.glob("gpuguard-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_installs_only_the_gpuguard_name(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/", 1)[0] for name in wheel.namelist() if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"gpuguard"}


def test_the_wheel_holds_every_module_and_the_package_data(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for package, folder in PACKAGE_DIRS.items():
        for path in (REPO / folder).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            inside = package.replace(".", "/") + "/" + path.relative_to(REPO / folder).as_posix()
            assert inside in names, f"{inside} is not in the wheel: list its package in pyproject.toml"
    assert "gpuguard/policies/default-config.yaml" in names


def test_a_users_own_generic_packages_change_nothing(tmp_path: Path) -> None:
    """Packages named like the repository's folders, first on sys.path, are not what gpuguard imports."""
    for name in ("policies", "webhook", "certs", "workloads", "kubeapi"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('the user\\'s own {name} package')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "policies"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "checkpoint-volume" in proc.stdout and "Traceback" not in proc.stderr
