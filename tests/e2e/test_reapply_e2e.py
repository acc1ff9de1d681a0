"""Re-applying an unchanged install changes nothing, and kubectl says so: every object "unchanged".

GitOps tools and admins re-apply the same manifests over and over; a field the apiserver does not
store as written (a default it drops, such as a PriorityClass's ``globalDefault: false``, or a value it
normalises) makes kubectl's three-way merge send it again on every apply, so the object is reported
"configured" forever and looks like drift.  Here each install (the kustomize base, the overlays that
need no third-party CRDs, the scan, and the Helm chart rendered as Argo CD renders it) is applied twice
to the real apiserver: the second apply must report every object "unchanged", and ``kubectl diff``
must find no difference.

Two reports are kubectl's own and not a field of ours, so they are allowed only where the apiserver
confirms that nothing changed (the object's ``generation`` is the same after the apply):

- a PodDisruptionBudget: ``spec.selector`` has patch strategy ``replace``, so kubectl's client-side
  three-way patch always carries it, equal or not;

The self-managed overlay ships its webhook configurations with ``webhooks: []`` on purpose (a re-applied
empty list keeps the webhooks the server writes: tests/e2e/test_selfmanaged_certs_e2e.py).  The apiserver
does not store an empty list, so until the server has written its webhooks each re-apply writes the
empty list again; the steady state is what is tested here: the webhooks written between the two
applies, as the server writes them (an update of the whole configuration), and then nothing is re-sent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
import yaml

from tests.support.gpuguard_process import ROOT
from tests.support.helm import CHART, helm

pytestmark = pytest.mark.e2e

APPLIED = re.compile(r"^(?P<object>\S+/\S+) (?P<how>created|configured|unchanged)$")
PDB = re.compile(r"^poddisruptionbudget\.policy/")


def _server_writes_its_webhooks(cp) -> None:
    """What ``serve --self-managed-certs`` does once it can answer: the full configurations of its ConfigMap,
    written over the empty ones by an API update (a raw PUT: ``kubectl replace -f`` would also rewrite
    kubectl's last-applied annotation, which the server never touches), the object's other metadata kept."""
    source = ROOT / "deploy" / "overlays" / "self-managed" / "webhooks.yaml"
    for full in (d for d in yaml.safe_load_all(source.read_text()) if d):
        name = full["metadata"]["name"]
        live = cp.kubectl_json("get", full["kind"].lower(), name)
        assert not live.get("webhooks"), "the overlay installed webhooks before the server wrote them"
        plural = full["kind"].lower() + "s"
        cp.kubectl("replace", "--raw", f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", "-f", "-",
                   input=json.dumps({**live, "webhooks": full["webhooks"]}))
        assert len(cp.kubectl_json("get", full["kind"].lower(), name)["webhooks"]) == len(full["webhooks"])


TARGETS: dict[str, tuple[tuple[re.Pattern[str], ...], Callable | None]] = {
    "deploy/base": ((PDB,), None),
    "deploy/overlays/dev": ((), None),
    "deploy/overlays/self-managed": ((PDB,), _server_writes_its_webhooks),
    "deploy/scan": ((), None),
}


def _reports(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        m = APPLIED.match(line.strip())
        assert m, f"unexpected kubectl apply output: {line!r}"
        out[m["object"]] = m["how"]
    return out


def _generations(cp, names: list[str]) -> dict[str, int]:
    return {name: cp.kubectl_json("get", name, "-n", "gpuguard")["metadata"].get("generation") for name in names}


def _apply_twice(cp, source: list[str], allowed: tuple[re.Pattern[str], ...], stdin: str | None = None,
                 between: Callable | None = None) -> None:
    first = cp.kubectl("apply", *source, input=stdin)
    objects = list(_reports(first.stdout))
    assert len(objects) > 1, first.stdout
    if between:
        between(cp)
    excused = [name for name in objects if any(p.match(name) for p in allowed)]
    before = _generations(cp, excused)
    second = _reports(cp.kubectl("apply", *source, input=stdin).stdout)
    assert sorted(second) == sorted(objects)
    drift = {name: how for name, how in second.items() if how != "unchanged" and name not in excused}
    assert not drift, f"re-applying the unchanged manifests changed or re-sent: {drift}"
    # kubectl's own "configured" for the excused ones was a no-op on the server.
    assert _generations(cp, excused) == before
    diff = cp.kubectl("diff", *source, input=stdin, check=False)
    assert diff.returncode == 0, f"kubectl diff after the apply:\n{diff.stdout}{diff.stderr}"


def _namespace(cp) -> None:
    if cp.kubectl("get", "namespace", "gpuguard", check=False).returncode != 0:
        cp.kubectl("create", "namespace", "gpuguard")


@pytest.mark.parametrize("target", list(TARGETS))
def test_a_second_kubectl_apply_k_reports_every_object_unchanged(control_plane, target):
    _namespace(control_plane)
    allowed, between = TARGETS[target]
    _apply_twice(control_plane, ["-k", str(ROOT / target)], allowed, between=between)


def test_the_charts_rendered_objects_reapply_unchanged_too(control_plane):
    """Argo CD and Flux's kustomize-helm render the chart and apply the objects: the same rule holds."""
    _namespace(control_plane)
    rendered = helm("template", "gpuguard", str(CHART), "--namespace", "gpuguard", "--set", "scan.enabled=true").stdout
    _apply_twice(control_plane, ["-f", "-"], (PDB,), stdin=rendered)


def test_the_priority_classes_carry_no_field_the_apiserver_drops(control_plane):
    """What the base used to re-send: ``globalDefault: false`` is not stored, so it is not written either."""
    control_plane.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    stored = control_plane.kubectl_json("get", "priorityclass", "training-standard")
    assert "globalDefault" not in stored and stored["preemptionPolicy"] == "Never"
