"""The Helm chart through a real kube-apiserver: install, a GPU Job through it, upgrade, uninstall.

The e2e cluster has no kubelet, so the chart's Deployment never runs a pod; the chart is installed
with its URL mode pointing the webhook configurations at a ``gpuguard serve`` the test starts, which
is how every e2e test reaches gpuguard.  Everything else is what an admin's `helm install` creates.
"""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import yaml

from tests.support.builders import bare_pod_spec, make, pvc_pod_spec
from tests.support.gpuguard_process import DEFAULT_CONFIG, GpuguardServer, gpuguard
from tests.support.helm import CHART, helm

pytestmark = pytest.mark.e2e
USER = "alice"
RELEASE_NS = "gpuguard"
# What a release leaves in the cluster: every kind the chart renders, cluster-wide and in its namespace.
CLUSTER_KINDS = "mutatingwebhookconfigurations,validatingwebhookconfigurations,clusterroles,clusterrolebindings," \
                "priorityclasses"
NAMESPACED_KINDS = "deployments,replicasets,pods,services,serviceaccounts,configmaps,poddisruptionbudgets," \
                   "networkpolicies,resourcequotas,secrets"


@pytest.fixture(scope="module")
def server(control_plane, tmp_path_factory):
    gpuguard = GpuguardServer(tmp_path_factory.mktemp("gpuguard"), DEFAULT_CONFIG.read_text())
    gpuguard.start()
    yield gpuguard
    gpuguard.stop()
    print(f"\n[e2e] gpuguard log: {gpuguard.log}")


def _helm(cp, *args: str, check: bool = True):
    return helm(*args, "--kubeconfig", str(cp.kubeconfig), check=check)


def _gpu_job(ns: str, name: str, pvc: bool) -> str:
    return yaml.safe_dump(make("Job", pvc_pod_spec() if pvc else bare_pod_spec(), name=name, namespace=ns))


def _team_namespace(cp) -> str:
    ns = f"team-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    return ns


def _as_alice(cp, ns: str, name: str, pvc: bool):
    return cp.kubectl(f"--as={USER}", "apply", "-f", "-", input=_gpu_job(ns, name, pvc), check=False)


def _labelled(cp, kinds: str, *scope: str) -> list[str]:
    listed = cp.kubectl_json("get", kinds, "-l", "app.kubernetes.io/name=gpuguard", *scope)
    return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in listed["items"])


def test_install_admit_upgrade_uninstall(control_plane, server):
    cp = control_plane
    ca = base64.b64encode(server.ca.read_bytes()).decode()
    # certificates.mode=secret without webhook.caBundle: the CA goes in with `gpuguard certs inject`, as
    # docs/admin.md allows; Helm's later upgrades must keep what it patched.
    _helm(cp, "install", "gpuguard", str(CHART), "--namespace", RELEASE_NS, "--create-namespace",
          "--set", f"webhook.url={server.url}")
    unbundled = cp.kubectl_json("get", "validatingwebhookconfiguration", "gpuguard")["webhooks"]
    assert all("caBundle" not in h["clientConfig"] for h in unbundled)
    gpuguard("certs", "inject", "--ca", str(server.ca), "--kubeconfig", str(cp.kubeconfig))

    # Installed: every object of the chart, the webhooks calling the test's server with its CA.
    installed = _labelled(cp, CLUSTER_KINDS)
    for name in ("MutatingWebhookConfiguration/gpuguard", "ValidatingWebhookConfiguration/gpuguard",
                 "ClusterRole/gpuguard", "ClusterRoleBinding/gpuguard", "PriorityClass/training-standard"):
        assert name in installed
    assert {"Deployment/gpuguard", "ConfigMap/gpuguard-config", "Service/gpuguard", "ServiceAccount/gpuguard",
            "PodDisruptionBudget/gpuguard", "NetworkPolicy/gpuguard"} <= set(_labelled(cp, NAMESPACED_KINDS,
                                                                                       "-n", RELEASE_NS))
    mutating = cp.kubectl_json("get", "mutatingwebhookconfiguration", "gpuguard")
    assert {h["clientConfig"]["url"] for h in mutating["webhooks"]} == {f"{server.url}/mutate"}
    assert {h["clientConfig"]["caBundle"] for h in mutating["webhooks"]} == {ca}
    config = cp.kubectl_json("get", "configmap", "gpuguard-config", "-n", RELEASE_NS)
    assert config["data"]["config.yaml"] == DEFAULT_CONFIG.read_text()

    # A GPU Job through it, as an ordinary user: denied without a checkpoint volume, mutated with one.
    ns = _team_namespace(cp)
    cp.wait_for(lambda: "checkpoint-volume" in _as_alice(cp, ns, "probe", pvc=False).stderr, timeout=60,
                message="the chart's webhooks in force")
    created = _as_alice(cp, ns, "train", pvc=True)
    assert created.returncode == 0, created.stderr
    job = cp.kubectl_json("get", "job", "train", "-n", ns)
    assert "gpu-tolerations" in job["metadata"]["annotations"]["gpuguard.io/mutated-by"]
    pod = job["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["priorityClassName"] == "training-standard" and job["spec"]["ttlSecondsAfterFinished"] == 86400

    # Upgrade with other values: the stored configurations follow, the rest of the release stays.
    _helm(cp, "upgrade", "gpuguard", str(CHART), "--namespace", RELEASE_NS, "--reuse-values",
          "--set", "webhook.failurePolicy=Ignore", "--set", "webhook.timeoutSeconds=5",
          "--set", "webhook.excludedNamespaces={" + ns + "}")
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        hooks = cp.kubectl_json("get", kind, "gpuguard")["webhooks"]
        assert {(h["failurePolicy"], h["timeoutSeconds"]) for h in hooks} == {("Ignore", 5)}
        assert all(ns in h["namespaceSelector"]["matchExpressions"][0]["values"] for h in hooks)
        assert {h["clientConfig"]["caBundle"] for h in hooks} == {ca}  # the injected CA survives the upgrade
    status = json.loads(_helm(cp, "status", "gpuguard", "--namespace", RELEASE_NS, "-o", "json").stdout)
    assert status["version"] == 2 and status["info"]["status"] == "deployed"
    # The namespace is now excluded: the apiserver no longer asks gpuguard, so the unmounted Job passes.
    cp.wait_for(lambda: _as_alice(cp, ns, "unjudged", pvc=False).returncode == 0, timeout=60,
                message="the upgraded exclusion in force")

    # Uninstall: nothing of gpuguard's is left (the Deployment's ReplicaSet goes by garbage collection).
    _helm(cp, "uninstall", "gpuguard", "--namespace", RELEASE_NS)
    cp.wait_for(lambda: not _labelled(cp, CLUSTER_KINDS) and not _labelled(cp, NAMESPACED_KINDS, "-n", RELEASE_NS),
                timeout=90, message="every gpuguard object deleted")
    releases = cp.kubectl_json("get", "secrets", "-n", RELEASE_NS, "-l", "owner=helm")["items"]
    assert releases == []
    other = _team_namespace(cp)
    unchecked = _as_alice(cp, other, "after", pvc=False)
    assert unchecked.returncode == 0, unchecked.stderr  # no webhook configuration remains
    assert "gpuguard.io/mutated-by" not in (cp.kubectl_json("get", "job", "after", "-n", other)["metadata"]
                                            .get("annotations") or {})
