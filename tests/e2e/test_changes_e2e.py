"""What gpuguard changed of a user's own values, as ``kubectl apply`` prints it through a real kube-apiserver.

A user (``alice``, a namespace-scoped RoleBinding) applies a Job asking a 30-day TTL next to her own spot
toleration: the apiserver stores the capped TTL and the grown list, and kubectl prints one
``Warning: gpuguard [policy] ...`` line for each, on the first apply and on every re-apply of the same
manifest (what GitOps does), because Git and the cluster keep disagreeing there.
"""

from __future__ import annotations

import json

import pytest

from tests.support.changes import SEVEN_DAYS, SPOT, THIRTY_DAYS, job
from tests.support.gpuguard_process import ROOT, default_config_with, in_force
from tests.support.tenant import TenantEnv, dump

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def env(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    e = TenantEnv(cp, "gitops")
    probe = e.namespace()
    with in_force(cp, tmp_path_factory.mktemp("gpuguard"), default_config_with("ml-exempt"),
                  lambda: "Warning: gpuguard [job-ttl]" in e.apply(job(probe, "probe")).stderr):
        yield e


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning: gpuguard [")]


def test_applying_a_30_day_ttl_as_a_user_warns_and_stores_the_cap(env):
    ns = env.namespace()
    result = env.apply(job(ns, "train"), check=True)
    warnings = _warnings(result.stderr)
    assert any(w.startswith(f"Warning: gpuguard [job-ttl] capped spec.ttlSecondsAfterFinished on the Job: "
                            f"{THIRTY_DAYS} -> {SEVEN_DAYS} (") for w in warnings), result.stderr
    assert any(w.startswith("Warning: gpuguard [gpu-tolerations] added 1 item to the user's "
                            "spec.template.spec.tolerations on the Job") for w in warnings), result.stderr
    stored = env.get("job", "train", "-n", ns)
    assert stored["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS
    assert stored["spec"]["template"]["spec"]["tolerations"][0] == SPOT
    assert len(stored["spec"]["template"]["spec"]["tolerations"]) == 2
    # Defaults added where the manifest says nothing (deadline, backoff, resources) are not changes.
    assert len(warnings) == 2, warnings

    # Re-applying the same manifest (a GitOps sync) says it again: Git still asks 30 days.
    again = env.apply(job(ns, "train"), check=True)
    assert any("[job-ttl] capped spec.ttlSecondsAfterFinished" in w for w in _warnings(again.stderr)), again.stderr
    assert env.get("job", "train", "-n", ns)["spec"]["ttlSecondsAfterFinished"] == SEVEN_DAYS


def test_diffs_made_by_a_server_side_dry_run_see_no_drift(env):
    """What Flux's drift detection and Argo CD's Server-Side Diff do: a dry run through the webhooks predicts the
    capped, extended object, which is what is stored (``kubectl diff`` as alice; a forced server-side apply)."""
    ns = env.namespace()
    env.apply(job(ns, "synced"), check=True)
    live = env.get("job", "synced", "-n", ns)
    diff = env.cp.kubectl("--as=alice", "diff", "-f", "-", input=dump(job(ns, "synced")), check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr  # 0: no differences
    changed = env.cp.kubectl("--as=alice", "diff", "-f", "-", input=dump(job(ns, "synced", ttl=3600)), check=False)
    assert changed.returncode == 1 and "ttlSecondsAfterFinished: 3600" in changed.stdout  # a real change shows
    dry = env.cp.kubectl("--as=alice", "apply", "--server-side", "--force-conflicts", "--field-manager=flux",
                         "--dry-run=server", "-o", "json", "-f", "-", input=dump(job(ns, "synced")))
    predicted = json.loads(dry.stdout)
    assert predicted["spec"] == live["spec"]
    assert "[job-ttl] capped" in dry.stderr  # the dry run is told too


def test_a_ttl_within_the_cap_is_stored_as_written_without_a_change_warning(env):
    ns = env.namespace()
    manifest = job(ns, "short", ttl=3600)
    manifest["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    result = env.apply(manifest, check=True)
    assert _warnings(result.stderr) == [], result.stderr
    assert env.get("job", "short", "-n", ns)["spec"]["ttlSecondsAfterFinished"] == 3600
