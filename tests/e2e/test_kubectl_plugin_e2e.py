"""``kubectl gpuguard …``: the installed ``kubectl-gpuguard`` script, found and run by the real kubectl.

kubectl runs ``kubectl-<name>`` from ``PATH`` for ``kubectl <name> …`` and hands it the rest of the
line and its environment (``KUBECONFIG`` included).  The script under test is the one ``pip install``
wrote from ``[project.scripts]`` (``scripts/test.sh`` installs the checkout), put alone on ``PATH``
so that no shim or other copy answers instead; the audit reaches the real apiserver through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

from gpuguard import webhook
from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import control_plane  # noqa: F401 - pytest fixture

pytestmark = pytest.mark.e2e

NS = "plugin-e2e"
JOB = f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: no-checkpoints, namespace: {NS}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: nvcr.io/nvidia/pytorch:24.05-py3
        resources: {{limits: {{nvidia.com/gpu: 2}}}}
"""


def installed_plugin() -> Path:
    """``kubectl-gpuguard`` as pip installed it (its completion helper beside it)."""
    scripts = Path(sysconfig.get_path("scripts"))
    for name, function in (("kubectl-gpuguard", "kubectl_plugin"), ("kubectl_complete-gpuguard", "kubectl_complete")):
        script = scripts / name
        assert script.is_file() and os.access(script, os.X_OK), f"{script} missing: pip install -e . installs it"
        assert f"from gpuguard.webhook.main import {function}" in script.read_text()  # pip's launcher
    return scripts / "kubectl-gpuguard"


def kubectl(cp: ControlPlane, *args: str, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path, "KUBECONFIG": str(cp.kubeconfig), "CI": "true"}
    assert cp.binaries is not None
    return subprocess.run([str(cp.binaries.kubectl), *args], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def test_kubectl_finds_and_runs_the_plugin(control_plane: ControlPlane) -> None:  # noqa: F811
    cp = control_plane
    script = installed_plugin()
    path = os.pathsep.join([str(script.parent), "/usr/bin", "/bin"])

    listed = kubectl(cp, "plugin", "list", path=path)
    assert listed.returncode == 0 and str(script) in listed.stdout, listed.stderr

    version = kubectl(cp, "gpuguard", "version", "-o", "json", path=path)
    assert version.returncode == 0, version.stderr
    assert json.loads(version.stdout) == {"version": webhook.version(), "commit": webhook.commit()}

    usage = kubectl(cp, "gpuguard", "--help", path=path)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: kubectl gpuguard ")
    audit_usage = kubectl(cp, "gpuguard", "audit", "--help", path=path)
    assert audit_usage.stdout.startswith("usage: kubectl gpuguard audit ")
    wrong = kubectl(cp, "gpuguard", "audit", "-o", "audit.json", path=path)
    assert wrong.returncode == 2 and "kubectl gpuguard audit: error:" in wrong.stderr
    assert "--output-file audit.json" in wrong.stderr and "Traceback" not in wrong.stderr

    completed = kubectl(cp, "__complete", "gpuguard", "audit", "-o", "s", path=path)  # what TAB asks
    assert completed.returncode == 0 and completed.stdout.splitlines() == ["sarif", ":4"], completed.stderr

    cp.kubectl("create", "namespace", NS)
    cp.kubectl("apply", "-f", "-", input=JOB)  # no webhook in this control plane: stored as written
    audit = kubectl(cp, "gpuguard", "audit", "--cluster", "-n", NS, "-o", "json", path=path)
    assert audit.returncode == 1, audit.stderr  # denied: no checkpoint storage
    [result] = json.loads(audit.stdout)["results"]
    assert result["name"] == "no-checkpoints" and not result["allowed"]
    assert "checkpoint-volume" in {v["policy"] for v in result["violations"]}
    quiet = kubectl(cp, "gpuguard", "audit", "--cluster", "-n", NS, "-q", path=path)
    assert (quiet.returncode, quiet.stdout) == (1, "")
