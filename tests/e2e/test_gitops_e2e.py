"""What Flux and Argo CD make of gpuguard's changes, asked of their own drift-detection code (docs/gitops.md).

``gitops-drift`` (tests/support/gitops/) links Flux's ``github.com/fluxcd/pkg/ssa`` and Argo CD's
``github.com/argoproj/gitops-engine`` and calls them as kustomize-controller and Argo CD's application
controller do, against the real kube-apiserver with gpuguard's webhooks in force.  Where the tools act
as their own service accounts, every request here is ``alice``'s (impersonated), an ordinary user with
a namespace-scoped RoleBinding.  The manifest is the one docs/gitops.md shows: a GPU Job asking a 30-day
``ttlSecondsAfterFinished`` (capped to 7 days) next to its own spot toleration (a list gpuguard grows).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.changes import SEVEN_DAYS, SPOT, THIRTY_DAYS, job
from tests.support.gitops import gitops_drift, require_gitops_drift
from tests.support.gpuguard_process import ROOT, default_config_with, gpuguard, in_force
from tests.support.tenant import TenantEnv, dump

pytestmark = pytest.mark.e2e
TTL = "spec.ttlSecondsAfterFinished"
TOLERATIONS = "spec.template.spec.tolerations"
CAPPED = f"gpuguard [job-ttl] capped spec.ttlSecondsAfterFinished on the Job: {THIRTY_DAYS} -> {SEVEN_DAYS} ("


class Tools:
    """The tenant, gpuguard's config, and ``gitops-drift`` run on manifests written to a scratch directory."""

    def __init__(self, tenant: TenantEnv, config: Path, scratch: Path) -> None:
        self.tenant, self.config, self.scratch = tenant, config, scratch

    def file(self, manifest: dict | str, name: str) -> Path:
        path = self.scratch / f"{name}.yaml"
        path.write_text(manifest if isinstance(manifest, str) else dump(manifest))
        return path

    def run(self, mode: str, manifest: dict | str, *flags: str) -> dict[str, Any]:
        result = gitops_drift(self.tenant.cp.kubeconfig, mode, self.file(manifest, mode), *flags)
        assert result["user"] == "alice" and len(result["objects"]) == 1, result
        return result

    def live(self, ns: str, name: str) -> dict:
        return self.tenant.get("job", name, "-n", ns, "--show-managed-fields")


@pytest.fixture(scope="module")
def tools(control_plane, tmp_path_factory):
    require_gitops_drift()  # built before gpuguard starts (cold: minutes)
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    tenant = TenantEnv(cp, "gitops-tools")
    probe = tenant.namespace()
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), default_config_with("ml-exempt"),
                  lambda: "Warning: gpuguard [job-ttl]" in tenant.apply(job(probe, "probe")).stderr) as server:
        yield Tools(tenant, server.config, tmp_path_factory.mktemp("manifests"))


def paths(result: dict) -> dict[str, dict]:
    return {d["path"]: d for d in result["objects"][0]["differences"]}


def capped_warnings(result: dict) -> list[str]:
    return [w for w in result["warnings"] if w.startswith(CAPPED)]


# ---------------------------------------------------------------------------------------------- Flux


def test_flux_applies_once_then_its_dry_run_through_the_webhook_finds_no_drift(tools):
    """docs/gitops.md, Flux: the server-side apply dry run passes through gpuguard, so the object Flux predicts
    carries the cap and the grown list, equals the live one, and Flux applies nothing further."""
    ns = tools.tenant.namespace()
    first = tools.run("flux-apply", job(ns, "train"))
    assert first["library"].startswith("github.com/fluxcd/pkg/ssa v"), first
    assert first["objects"][0]["action"] == "created", first
    assert capped_warnings(first), first["warnings"]  # the apiserver's answer to Flux's request
    live = tools.live(ns, "train")
    assert live["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS
    assert live["spec"]["template"]["spec"]["tolerations"][0] == SPOT
    assert len(live["spec"]["template"]["spec"]["tolerations"]) == 2
    assert live["metadata"]["labels"]["kustomize.toolkit.fluxcd.io/name"] == "gpu-workloads"
    assert any(m["manager"] == "kustomize-controller" and m["operation"] == "Apply"
               for m in live["metadata"]["managedFields"])

    # The next reconcile of the same Git state: ApplyAll's dry run (told of the cap again) equals the live object.
    again = tools.run("flux-apply", job(ns, "train"))
    assert again["objects"][0]["action"] == "unchanged" and not again["drifted"], again
    assert capped_warnings(again), again["warnings"]  # the dry run went through gpuguard
    diff = tools.run("flux-diff", job(ns, "train"))  # what `flux diff kustomization` runs
    assert diff["objects"][0]["action"] == "unchanged" and not diff["drifted"], diff
    assert tools.live(ns, "train")["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS


def test_flux_still_sees_real_drift_from_git_and_from_the_cluster(tools):
    """The no-drift verdict above is not blindness: a changed manifest, or a live value someone else changed, is
    drift, and the reconcile puts back what Git says as gpuguard stores it (the cap)."""
    ns = tools.tenant.namespace()
    tools.run("flux-apply", job(ns, "train"))
    changed = tools.run("flux-diff", job(ns, "train", ttl=3600))
    assert changed["drifted"] and changed["objects"][0]["action"] == "configured", changed
    assert paths(changed) == {TTL: {"path": TTL, "live": SEVEN_DAYS, "predicted": 3600}}, changed

    tools.tenant.cp.kubectl("--as=alice", "patch", "job", "train", "-n", ns, "--type=merge",
                            "-p", json.dumps({"spec": {"ttlSecondsAfterFinished": 100}}))
    edited = tools.run("flux-diff", job(ns, "train"))
    assert edited["drifted"], edited
    assert paths(edited) == {TTL: {"path": TTL, "live": 100, "predicted": SEVEN_DAYS}}, edited
    reconciled = tools.run("flux-apply", job(ns, "train"))
    assert reconciled["objects"][0]["action"] == "configured", reconciled
    assert tools.live(ns, "train")["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS
    assert not tools.run("flux-diff", job(ns, "train"))["drifted"]


# ---------------------------------------------------------------------------------------------- Argo CD


def test_argo_cd_default_diff_sees_the_cap_and_the_grown_list_as_out_of_sync(tools):
    """docs/gitops.md, Argo CD: the default (legacy) diff is three-way against the last-applied annotation that a
    client-side sync leaves; the capped value and the grown toleration list differ from it, and nothing else
    gpuguard added does.  A re-sync sends Git's values again and gpuguard caps them again: OutOfSync for good."""
    ns = tools.tenant.namespace()
    synced = tools.run("argo-apply", job(ns, "train"))  # gitops-engine's sync: client-side kubectl apply code
    assert synced["library"].startswith("github.com/argoproj/gitops-engine v"), synced
    assert "created" in synced["objects"][0]["action"] and capped_warnings(synced), synced
    live = tools.live(ns, "train")
    assert "kubectl.kubernetes.io/last-applied-configuration" in live["metadata"]["annotations"]
    assert len(live["spec"]["template"]["spec"]["tolerations"]) == 2

    legacy = tools.run("argo-legacy-diff", job(ns, "train"))
    assert legacy["drifted"], legacy
    found = paths(legacy)
    assert set(found) == {TTL, TOLERATIONS}, found  # the additions (resources, affinity, ...) are no drift
    assert (found[TTL]["live"], found[TTL]["predicted"]) == (SEVEN_DAYS, THIRTY_DAYS)
    assert found[TOLERATIONS]["predicted"] == [SPOT]
    assert len(found[TOLERATIONS]["live"]) == 2 and found[TOLERATIONS]["live"][0] == SPOT

    resynced = tools.run("argo-apply", job(ns, "train"))
    assert capped_warnings(resynced), resynced
    assert tools.live(ns, "train")["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS
    assert tools.run("argo-legacy-diff", job(ns, "train"))["drifted"]


def test_argo_cd_server_side_diff_sees_no_drift_with_or_without_mutation_webhooks(tools):
    """docs/gitops.md, Argo CD: Server-Side Diff predicts the object by a server-side apply dry run that passes
    through gpuguard: nothing is out of sync, and a real change still is.  With Argo CD's default
    (IncludeMutationWebhook off) gitops-engine reverts to their live values only the fields the dry run's
    managedFields do not give "argocd-controller"; the capped value and the grown list are fields the manifest
    sets, so the prediction keeps gpuguard's values there too, and the live object has its additions."""
    ns = tools.tenant.namespace()
    tools.run("argo-apply", job(ns, "train"))
    for include in ("true", "false"):
        ssd = tools.run("argo-ssd-diff", job(ns, "train"), f"--include-mutation-webhook={include}")
        assert not ssd["drifted"] and paths(ssd) == {}, (include, ssd)
        assert capped_warnings(ssd), ssd["warnings"]  # the dry run went through gpuguard

        changed = tools.run("argo-ssd-diff", job(ns, "train", ttl=3600), f"--include-mutation-webhook={include}")
        assert changed["drifted"], (include, changed)
        found = paths(changed)  # a spec change: the dry run's generation is one more (kept only with webhooks)
        assert found[TTL] == {"path": TTL, "live": SEVEN_DAYS, "predicted": 3600}, (include, changed)
        assert set(found) - {"metadata.generation"} == {TTL}, (include, changed)


def test_argo_cd_finds_nothing_once_git_says_what_runs(tools):
    """docs/gitops.md, `gpuguard fix`: with the webhook's changes written into the manifest the cluster has
    nothing left to change, and even Argo CD's default diff finds the Application in sync."""
    ns = tools.tenant.namespace()
    source = tools.file(job(ns, "train"), "git")
    fixed = gpuguard("fix", "--stdout", "--config", str(tools.config), str(source)).stdout
    assert f"ttlSecondsAfterFinished: {SEVEN_DAYS}" in fixed, fixed
    synced = tools.run("argo-apply", fixed)
    assert not [w for w in synced["warnings"] if w.startswith("gpuguard [")], synced["warnings"]
    legacy = tools.run("argo-legacy-diff", fixed)
    assert not legacy["drifted"], legacy
    assert not tools.run("argo-ssd-diff", fixed, "--include-mutation-webhook=true")["drifted"]


def test_flux_reconciles_a_removed_template_priority_again_without_error(tools):
    """docs/gitops.md's removals: gpuguard drops a template's ``priority`` where it sets the priorityClassName.
    Flux's next reconcile dry-runs the manifest (``priority: 1000`` again) against the stored Job."""
    ns = tools.tenant.namespace()
    manifest = job(ns, "prio", ttl=3600)
    manifest["spec"]["template"]["spec"].update(
        priority=1000, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    first = tools.run("flux-apply", manifest)
    assert first["objects"][0]["action"] == "created", first
    assert "priority" not in tools.live(ns, "prio")["spec"]["template"]["spec"]
    again = tools.run("flux-apply", manifest)  # once: "spec.template: ... field is immutable" from the dry run
    assert again["objects"][0]["action"] == "unchanged", again
