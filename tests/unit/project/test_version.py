"""``gpuguard --version``: pyproject's version and the commit, from wherever gpuguard runs.

Three places it runs from: this checkout (git knows the commit), a built wheel or image (the
build stamped ``BUILD_COMMIT`` into ``webhook/__init__.py``), and anything else (``unknown``,
never an error).  The stamped and unstamped copies are real files loaded as modules, stamped
with the Dockerfile's own ``sed`` expression.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from tests.support.paths import REPO

INIT = REPO / "webhook" / "__init__.py"


def pyproject_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def load_copy(folder: Path, text: str) -> ModuleType:
    """``webhook/__init__.py`` with ``text`` as a module of its own under ``folder`` (outside any checkout)."""
    path = folder / "webhook" / "__init__.py"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"gpuguard_copy_{abs(hash(folder))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_version_shows_pyprojects_version_and_the_checkouts_commit():
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip()
    for command in ([sys.executable, "-m", "gpuguard.webhook", "--version"], [shutil.which("gpuguard"), "--version"]):
        assert command[0], "the gpuguard console script is not installed"
        proc = subprocess.run(command, capture_output=True, text=True, cwd="/tmp", timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"gpuguard {pyproject_version()} (commit {head})\n"


def test_the_version_comes_from_the_installed_metadata_only():
    from gpuguard import webhook

    assert webhook.__version__ == webhook.version() == pyproject_version()
    # No second literal of the version in the package's source.
    assert pyproject_version() not in INIT.read_text()


def test_a_stamped_build_shows_its_commit(tmp_path):
    dockerfile = (REPO / "Dockerfile").read_text()
    expression = re.search(r'sed -i "(s/\^BUILD_COMMIT = None\$/(?:[^"\\]|\\.)*)" webhook/__init__.py', dockerfile)
    assert expression, "the Dockerfile no longer stamps BUILD_COMMIT"
    commit = "0123456789abcdef0123456789abcdef01234567"
    stamped = subprocess.run(["sed", expression[1].replace("\\\"", '"').replace("$GIT_COMMIT", commit)],
                             input=INIT.read_text(), capture_output=True, text=True, check=True).stdout
    assert f'BUILD_COMMIT = "{commit}"' in stamped
    assert load_copy(tmp_path, stamped).commit() == commit


def test_outside_a_checkout_and_unstamped_the_commit_is_unknown(tmp_path):
    module = load_copy(tmp_path, INIT.read_text())
    assert module.commit() == "unknown"
