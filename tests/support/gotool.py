"""Tools the tests build from the Go module proxy into the e2e cache (helm, actionlint, promtool).

Each has a ``build.sh`` beside its support module that pins the release (``NAME_VERSION`` with a
default) and installs the binary as ``$GPUGUARD_E2E_CACHE/<tool>-<version>/<tool>``; ``scripts/test.sh``
runs the scripts first, and a test asking for a tool that is not there yet builds it when Go is
there, else fails under CI and skips elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class GoTool:
    """One tool: its binary name, the variable its build script pins the release with, the script."""

    name: str
    version_variable: str
    build_script: Path
    build_timeout: float = 1800

    def version(self) -> str:
        """The release the build script builds (its default, or the environment's)."""
        variable = re.escape(self.version_variable)
        found = re.search(rf'{variable}="\$\{{{variable}:-(v[0-9.]+)\}}"', self.build_script.read_text())
        assert found, f"{self.build_script} no longer sets a default {self.version_variable}"
        return os.environ.get(self.version_variable) or found[1]

    def path(self) -> Path:
        root = os.environ.get("GPUGUARD_E2E_CACHE") or str(Path.home() / ".cache" / "gpuguard-e2e")
        return Path(root) / f"{self.name}-{self.version()}" / self.name

    def require(self) -> Path:
        """The binary, built first when Go is there; a skip without Go, a failure under CI."""
        path = self.path()
        if path.is_file():
            return path
        if shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK):
            proc = subprocess.run(["bash", str(self.build_script)], capture_output=True, text=True,
                                  timeout=self.build_timeout, check=False)
            output = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            assert proc.returncode == 0 and path.is_file(), f"{self.name} build failed:\n{output}"
            return path
        if os.environ.get("CI"):
            pytest.fail(f"{self.name} is required in CI and Go is missing to build it ({self.build_script})",
                        pytrace=False)
        pytest.skip(f"{self.name} not built and Go missing: run `bash {self.build_script}` "
                    "(set CI=1 to make this a failure)")
        raise AssertionError("unreachable")
