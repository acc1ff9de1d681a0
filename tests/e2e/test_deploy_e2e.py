"""The deploy manifests, validated by a real apiserver with kubectl (server-side dry run: nothing is stored)."""

from __future__ import annotations

import pytest

from tests.e2e.gpuguard_process import ROOT

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("target", ["deploy/base", "deploy/overlays/dev"])
def test_kustomizations_pass_server_side_validation(control_plane, target):
    # A server-side dry run can't create objects in a namespace the same dry run "creates".
    if control_plane.kubectl("get", "namespace", "gpuguard", check=False).returncode != 0:
        control_plane.kubectl("create", "namespace", "gpuguard")
    result = control_plane.kubectl("apply", "--dry-run=server", "-k", str(ROOT / target), check=False)
    assert result.returncode == 0, result.stderr
    expected = ["deployment.apps/gpuguard", "mutatingwebhookconfiguration.admissionregistration.k8s.io/gpuguard",
                "priorityclass.scheduling.k8s.io/inference-critical"]
    if target == "deploy/base":  # the dev overlay runs one replica and drops the PDB
        expected.append("poddisruptionbudget.policy/gpuguard")
    for name in expected:
        assert name in result.stdout
    stored = control_plane.kubectl("get", "deployment", "gpuguard", "-n", "gpuguard", check=False)
    assert stored.returncode != 0  # a dry run stores nothing


def test_kustomizations_pass_client_side_dry_run(control_plane):
    result = control_plane.kubectl("apply", "--dry-run=client", "-k", str(ROOT / "deploy/base"), check=False)
    assert result.returncode == 0, result.stderr
    assert "service/gpuguard created (dry run)" in result.stdout
