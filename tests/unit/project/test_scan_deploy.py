"""deploy/scan: the background scan's Deployment and least-privilege RBAC, rendered by kubectl's kustomize.

The e2e suite runs the scan with this ServiceAccount's RBAC (tests/e2e/test_scan_e2e.py); here the
rules are held to the kind table, so a new kind cannot be left unwatched for lack of a rule.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from gpuguard.webhook.main import build_parser
from gpuguard.webhook.objects import READABLE
from gpuguard.workloads.kinds import KINDS
from tests.support.paths import REPO

SCAN = REPO / "deploy" / "scan"


def _render() -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI to render deploy/")
        pytest.skip("kubectl not installed (set CI=1 to make this a failure)")
    proc = subprocess.run([kubectl, "kustomize", str(SCAN)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


OBJECTS = _render() if shutil.which("kubectl") else []


def _one(kind: str, name: str) -> dict[str, Any]:
    found = [o for o in OBJECTS if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0]


def _granted(rules: list[dict], verb: str) -> set[tuple[str, str]]:
    return {(group, resource) for rule in rules if verb in rule["verbs"] and "resourceNames" not in rule
            for group in rule["apiGroups"] for resource in rule["resources"]}


def test_the_cluster_role_lets_the_scan_list_and_watch_every_kind_and_runtime_and_nothing_secret() -> None:
    rules = _one("ClusterRole", "gpuguard-scan")["rules"]
    wanted = {(spec.group, spec.plural) for spec in KINDS} | {(group, plural) for (group, _), (_, plural)
                                                              in READABLE.items()}
    wanted |= {("", "namespaces"), ("", "nodes"), ("resource.k8s.io", "resourceclaimtemplates"),
               ("resource.k8s.io", "resourceclaims")}
    for verb in ("list", "watch"):
        assert wanted <= _granted(rules, verb), sorted(wanted - _granted(rules, verb))
    assert not any(("", r) in _granted(rules, v) for r in ("secrets", "configmaps") for v in ("get", "list", "watch"))
    assert all("*" not in rule["apiGroups"] and "*" not in rule["resources"] for rule in rules)
    writes = {(g, r) for v in ("create", "update", "delete") for g, r in _granted(rules, v)}
    assert writes == {("wgpolicyk8s.io", "policyreports"), ("wgpolicyk8s.io", "clusterpolicyreports"),
                      ("openreports.io", "reports"), ("openreports.io", "clusterreports")}  # --report-api


def test_the_lease_is_written_only_in_gpuguards_namespace_and_only_by_its_name() -> None:
    role = _one("Role", "gpuguard-scan-lease")
    assert role["metadata"]["namespace"] == "gpuguard"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["gpuguard-scan"], "verbs": ["get", "update"]}]
    binding = _one("RoleBinding", "gpuguard-scan-lease")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuguard-scan", "namespace": "gpuguard"}]


def test_the_deployment_runs_the_scan_verb_with_the_webhooks_config_hardened() -> None:
    deployment = _one("Deployment", "gpuguard-scan")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2 and pod["serviceAccountName"] == "gpuguard-scan"
    (container,) = pod["containers"]
    args = [a.replace("$(POD_NAME)", "gpuguard-scan-0") for a in container["args"]]
    parsed = build_parser("scan").parse_args(args)  # the flags exist, as the image's entry point gets them
    assert parsed.command == "scan" and parsed.config == "/etc/gpuguard/config.yaml" and parsed.dra_claims
    assert parsed.lease_name == "gpuguard-scan" and parsed.lease_namespace == "gpuguard", shlex.join(args)
    assert {v["name"]: v for v in pod["volumes"]}["config"]["configMap"]["name"] == "gpuguard-config"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"] and not security["allowPrivilegeEscalation"]
    assert container["ports"][0]["containerPort"] == parsed.metrics_port
    service = _one("Service", "gpuguard-scan-metrics")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
