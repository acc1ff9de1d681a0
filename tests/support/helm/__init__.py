"""Helm for the chart tests: the binary ``build.sh`` builds from the Go module proxy into the e2e cache."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

BUILD_SCRIPT = REPO / "tests" / "support" / "helm" / "build.sh"
CHART = REPO / "deploy" / "chart" / "gpuguard"


def helm_version() -> str:
    """The release ``build.sh`` builds (its ``HELM_VERSION`` default, or the environment's)."""
    found = re.search(r'HELM_VERSION="\$\{HELM_VERSION:-(v[0-9.]+)\}"', BUILD_SCRIPT.read_text())
    assert found, "build.sh no longer sets a default HELM_VERSION"
    return os.environ.get("HELM_VERSION") or found[1]


def helm_path() -> Path:
    root = os.environ.get("GPUGUARD_E2E_CACHE") or str(Path.home() / ".cache" / "gpuguard-e2e")
    return Path(root) / f"helm-{helm_version()}" / "helm"


def require_helm() -> Path:
    """The helm binary, built first when Go is there; a skip without Go, a failure under CI."""
    path = helm_path()
    if path.is_file():
        return path
    if shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK):
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=1800, check=False)
        output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert proc.returncode == 0 and path.is_file(), f"helm build failed:\n{output}"
        return path
    if os.environ.get("CI"):
        pytest.fail(f"helm is required in CI and Go is missing to build it ({BUILD_SCRIPT})", pytrace=False)
    pytest.skip(f"helm not built and Go missing: run `bash {BUILD_SCRIPT}` (set CI=1 to make this a failure)")
    raise AssertionError("unreachable")


def helm(*args: str, env: dict[str, str] | None = None, check: bool = True,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with a private home (no repositories, cache or registry login of the user's)."""
    home = Path(os.environ.get("GPUGUARD_HELM_HOME", "/tmp/gpuguard-helm-home"))
    base = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"), **(env or {})}
    proc = subprocess.run([str(require_helm()), *args], capture_output=True, text=True, env=base,
                          timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc
