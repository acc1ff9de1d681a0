"""actionlint for the workflow tests: the binary ``build.sh`` builds from the Go module proxy into the e2e cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

BUILD_SCRIPT = REPO / "tests" / "support" / "actionlint" / "build.sh"


def actionlint_version() -> str:
    """The release ``build.sh`` builds (its ``ACTIONLINT_VERSION`` default, or the environment's)."""
    found = re.search(r'ACTIONLINT_VERSION="\$\{ACTIONLINT_VERSION:-(v[0-9.]+)\}"', BUILD_SCRIPT.read_text())
    assert found, "build.sh no longer sets a default ACTIONLINT_VERSION"
    return os.environ.get("ACTIONLINT_VERSION") or found[1]


def actionlint_path() -> Path:
    root = os.environ.get("GPUGUARD_E2E_CACHE") or str(Path.home() / ".cache" / "gpuguard-e2e")
    return Path(root) / f"actionlint-{actionlint_version()}" / "actionlint"


def require_actionlint() -> Path:
    """The actionlint binary, built first when Go is there; a skip without Go, a failure under CI."""
    path = actionlint_path()
    if path.is_file():
        return path
    if shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK):
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=900, check=False)
        output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0 and path.is_file(), f"actionlint build failed:\n{output}"
        return path
    if os.environ.get("CI"):
        pytest.fail(f"actionlint is required in CI and Go is missing to build it ({BUILD_SCRIPT})", pytrace=False)
    pytest.skip(f"actionlint not built and Go missing: run `bash {BUILD_SCRIPT}` (set CI=1 to make this a failure)")
    raise AssertionError("unreachable")


def actionlint(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run actionlint from the repository root (it finds .github/workflows there) with shellcheck."""
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, f"shellcheck is missing: `bash {BUILD_SCRIPT}` installs it (as root)"
    return subprocess.run([str(require_actionlint()), "-no-color", "-oneline", "-shellcheck", shellcheck, *args],
                          input=stdin, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
