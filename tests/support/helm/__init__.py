"""Helm for the chart tests: the binary ``build.sh`` builds from the Go module proxy into the e2e cache."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.gotool import GoTool
from tests.support.paths import REPO

BUILD_SCRIPT = REPO / "tests" / "support" / "helm" / "build.sh"
CHART = REPO / "deploy" / "chart" / "gpuguard"


HELM = GoTool("helm", "HELM_VERSION", BUILD_SCRIPT)
helm_version, helm_path, require_helm = HELM.version, HELM.path, HELM.require


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
