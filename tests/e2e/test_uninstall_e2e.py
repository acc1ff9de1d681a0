"""Uninstall leaves nothing of gpuguard's, for every install path, with the commands docs/admin.md shows.

The recipes are read from docs/admin.md ("Uninstall": the fenced block after each ``<!-- uninstall: NAME -->``)
and run as written (paths made absolute, ``deploy/base`` replaced by the overlay applied), each twice: the
second run must succeed too (an interrupted uninstall is finished by running it again).  Then nothing of
gpuguard's may remain: no webhook configuration, no cluster-wide RBAC, no PriorityClass (unless the recipe
that keeps them ran), no ``gpuguard`` namespace, no PolicyReport the scan wrote.  The Prometheus Operator's
and cert-manager's kinds are stood in for by CRDs of the same group and kind (the apiserver only needs to
store the objects).
"""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.support.gpuguard_process import ROOT
from tests.support.helm import CHART, helm
from tests.support.scan_process import install_report_crds

pytestmark = pytest.mark.e2e

ADMIN = ROOT / "docs" / "admin.md"
RECIPE = re.compile(r"<!-- uninstall: (?P<name>[a-z-]+) -->\n```sh\n(?P<body>.*?)```", re.S)
STAND_INS = (("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"),
             ("monitoring.coreos.com", "PrometheusRule", "prometheusrules"),
             ("cert-manager.io", "Issuer", "issuers"), ("cert-manager.io", "Certificate", "certificates"))
REPORT_LABELS = {"app.kubernetes.io/managed-by": "gpuguard", "gpuguard.io/report": "scan"}


def recipe(name: str, base: str = "deploy/base") -> list[list[str]]:
    """The commands of one documented recipe, as argv lists, for the install applied from ``base``."""
    found = {m["name"]: m["body"] for m in RECIPE.finditer(ADMIN.read_text())}
    assert name in found, f"docs/admin.md has no '<!-- uninstall: {name} -->' block"
    commands = []
    for line in found[name].splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            words = [w.replace("deploy/base", base) for w in shlex.split(line)]
            commands.append([str(ROOT / w) if w.startswith("deploy/") else w for w in words])
    return commands


def run(cp, commands: list[list[str]]) -> None:
    for argv in commands:
        if argv[0] == "kubectl":
            cp.kubectl(*argv[1:], timeout=180)
        else:
            assert argv[0] == "helm", argv
            helm(*argv[1:], "--kubeconfig", str(cp.kubeconfig), timeout=180)


def _stand_in_crds(cp) -> None:
    for group, kind, plural in STAND_INS:
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.{group}"},
               "spec": {"group": group, "scope": "Namespaced",
                        "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd))
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{plural}.{group}", timeout=70)


@pytest.fixture(scope="module")
def cp(control_plane):
    install_report_crds(control_plane)
    _stand_in_crds(control_plane)
    return control_plane


def _names(cp, kinds: str, selector: str | None = None) -> list[str]:
    args = ["get", kinds, "-o", "name"] + (["-l", selector] if selector else [])
    return [n for n in cp.kubectl(*args).stdout.split() if "gpuguard" in n or selector]


def _a_report(cp, ns: str) -> None:
    """What the scan writes: a PolicyReport with its labels (the scan itself is tested in test_scan_e2e)."""
    cp.kubectl("create", "namespace", ns, check=False)
    report = {"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
              "metadata": {"name": "gpuguard-job-train", "namespace": ns, "labels": REPORT_LABELS},
              "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
              "results": [{"policy": "checkpoint-volume", "result": "fail", "source": "gpuguard",
                           "message": "[checkpoint-volume] no checkpoints"}]}
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(report))


def leftovers(cp, *, priority_classes_kept: bool = False) -> dict[str, list[str]]:
    """Everything of gpuguard's still in the cluster, once the namespace has finished terminating."""
    cp.wait_for(lambda: cp.kubectl("get", "namespace", "gpuguard", check=False).returncode != 0, timeout=120,
                interval=1, message="namespace gpuguard still there")
    found = {
        "webhooks": _names(cp, "mutatingwebhookconfigurations,validatingwebhookconfigurations"),
        "cluster RBAC": _names(cp, "clusterroles,clusterrolebindings"),
        "reports": cp.kubectl("get", "policyreports,clusterpolicyreports", "-A", "-o", "name", "-l",
                              "app.kubernetes.io/managed-by=gpuguard").stdout.split(),
    }
    if not priority_classes_kept:
        found["priority classes"] = _names(cp, "priorityclasses", "app.kubernetes.io/name=gpuguard")
    return {what: names for what, names in found.items() if names}


KUSTOMIZE = ["deploy/base", "deploy/overlays/dev", "deploy/overlays/self-managed", "deploy/overlays/cert-manager"]


@pytest.mark.parametrize("base", KUSTOMIZE)
def test_the_kustomize_recipe_leaves_nothing_and_runs_twice(cp, base):
    cp.kubectl("apply", "-k", str(ROOT / base))
    cp.kubectl("apply", "-k", str(ROOT / "deploy" / "scan"))
    cp.kubectl("apply", "-k", str(ROOT / "deploy" / "monitoring"))
    _a_report(cp, "team-a")
    assert _names(cp, "clusterroles") and _names(cp, "priorityclasses", "app.kubernetes.io/name=gpuguard")
    commands = recipe("kustomize", base) + recipe("reports")
    run(cp, commands)
    run(cp, commands)  # again: nothing left to delete is not an error
    assert leftovers(cp) == {}


def test_keeping_the_priority_classes_keeps_only_them(cp):
    cp.kubectl("apply", "-k", str(ROOT / "deploy" / "base"))
    classes = sorted(_names(cp, "priorityclasses", "app.kubernetes.io/name=gpuguard"))
    assert len(classes) == 4
    steps = [c for c in recipe("kustomize") if "deploy/base" not in " ".join(c)] + recipe("keep-priority-classes")
    run(cp, steps)
    run(cp, steps)
    assert leftovers(cp, priority_classes_kept=True) == {}
    assert sorted(_names(cp, "priorityclasses", "app.kubernetes.io/name=gpuguard")) == classes
    cp.kubectl("delete", "priorityclasses", "-l", "app.kubernetes.io/name=gpuguard")


def test_the_helm_recipe_leaves_nothing_and_runs_twice(cp):
    helm("install", "gpuguard", str(CHART), "--namespace", "gpuguard", "--create-namespace", "--set",
         "scan.enabled=true", "--kubeconfig", str(cp.kubeconfig), timeout=180)
    _a_report(cp, "team-b")
    assert _names(cp, "clusterroles")
    commands = recipe("helm") + recipe("reports")
    run(cp, commands)
    run(cp, commands)
    assert leftovers(cp) == {}
