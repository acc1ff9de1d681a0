"""The deploy manifests, validated by a real apiserver with kubectl (server-side dry run: nothing is stored)."""

from __future__ import annotations

import pytest

from tests.support.gpuguard_process import ROOT

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("target", ["deploy/base", "deploy/overlays/dev", "deploy/overlays/self-managed"])
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


def test_certs_inject_patches_ca_bundle_through_the_real_api(control_plane, tmp_path):
    import base64

    from tests.support.gpuguard_process import gpuguard

    name = "gpuguard-inject-e2e"
    rendered = gpuguard("webhook-config", "--service", "gpuguard/gpuguard", "--name", name,
                        "--failure-policy", "Ignore").stdout
    control_plane.kubectl("apply", "-f", "-", input=rendered)
    certs = tmp_path / "certs"
    gpuguard("certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", str(certs))
    missing = gpuguard("certs", "inject", "--ca", str(certs / "ca.crt"), "--kubeconfig",
                       str(control_plane.kubeconfig), "--name", "does-not-exist", check=False)
    assert missing.returncode == 2 and "gpuguard: error:" in missing.stderr and "Traceback" not in missing.stderr
    gpuguard("certs", "inject", "--ca", str(certs / "ca.crt"), "--kubeconfig", str(control_plane.kubeconfig),
             "--name", name)
    expected = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        stored = control_plane.kubectl_json("get", kind, name)
        assert [w["clientConfig"]["caBundle"] for w in stored["webhooks"]] == [expected] * len(stored["webhooks"])
    control_plane.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", name)
