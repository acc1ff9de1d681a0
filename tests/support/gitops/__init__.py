"""The GitOps tools' own drift detection, for the GitOps e2e tests: ``gitops-drift``, which ``build.sh`` builds.

``gitops-drift`` (``main.go``) links Flux's ``github.com/fluxcd/pkg/ssa`` and Argo CD's
``github.com/argoproj/gitops-engine`` and calls them as kustomize-controller and Argo CD's application
controller do; see the script for the versions.  Its cache directory is named after the sources'
hash, so an edited ``main.go`` or ``go.mod`` is built anew.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.gotool import GoTool
from tests.support.paths import REPO

HERE = REPO / "tests" / "support" / "gitops"
BUILD_SCRIPT = HERE / "build.sh"
SOURCES = ("go.mod", "go.sum", "main.go")  # what build.sh hashes, in its order


class _SourceKeyedTool(GoTool):
    """A GoTool whose "version" is the hash of its sources (there is no release to pin)."""

    def version(self) -> str:
        return hashlib.sha256(b"".join((HERE / name).read_bytes() for name in SOURCES)).hexdigest()[:12]


GITOPS_DRIFT = _SourceKeyedTool("gitops-drift", "", BUILD_SCRIPT, build_timeout=3600)
require_gitops_drift = GITOPS_DRIFT.require


def gitops_drift(kubeconfig: Path, mode: str, manifest: Path, *flags: str, user: str | None = "alice",
                 timeout: float = 180) -> dict[str, Any]:
    """Run one mode (``flux-apply``, ``flux-diff``, ``argo-apply``, ``argo-legacy-diff``, ``argo-ssd-diff``) on a
    manifest as ``user`` (impersonated, as ``kubectl --as``) and return its JSON verdict."""
    argv = [str(require_gitops_drift()), "--kubeconfig", str(kubeconfig), "--mode", mode, "-f", str(manifest),
            *(["--as", user] if user else []), *flags]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"gitops-drift --mode {mode} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)
