"""deploy/: the kustomize base and overlays, rendered by kubectl's built-in kustomize.

``kubectl apply --dry-run=client`` still needs a live apiserver for discovery, so the manifests
are rendered with ``kubectl kustomize`` (the same kustomize ``apply -k`` runs) and the objects
an admin would apply are checked here; the end-to-end tests apply them for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO

ROOT = REPO
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
POD_LABELS = {"app.kubernetes.io/name": "gpuguard", "app.kubernetes.io/component": "webhook"}


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI to render deploy/")
        pytest.skip("kubectl not installed (set CI=1 to make this a failure)")
    return path


@cache
def _render_cached(kubectl: str, directory: str) -> tuple[dict[str, Any], ...]:
    proc = subprocess.run([kubectl, "kustomize", directory], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


def render(directory: Path) -> list[dict[str, Any]]:
    return list(_render_cached(_kubectl(), str(directory)))


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


# ---------------------------------------------------------------- files


def test_priorityclasses_file_stands_alone() -> None:
    docs = [d for d in yaml.safe_load_all((BASE / "priorityclasses.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"PriorityClass"}
    names = {d["metadata"]["name"] for d in docs}
    assert names == {"inference-critical", "inference-standard", "training-standard", "notebook-dev"}


# ---------------------------------------------------------------- base


def test_base_has_every_object() -> None:
    objects = render(BASE)
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == sorted([
        ("Namespace", "gpuguard"), ("ServiceAccount", "gpuguard"), ("ClusterRole", "gpuguard"),
        ("ClusterRoleBinding", "gpuguard"), ("ResourceQuota", "gpuguard-critical-pods"),
        ("ConfigMap", "gpuguard-config"), ("Deployment", "gpuguard"), ("PodDisruptionBudget", "gpuguard"),
        ("NetworkPolicy", "gpuguard"),
        ("Service", "gpuguard"), ("MutatingWebhookConfiguration", "gpuguard"),
        ("ValidatingWebhookConfiguration", "gpuguard"), ("PriorityClass", "inference-critical"),
        ("PriorityClass", "inference-standard"), ("PriorityClass", "training-standard"),
        ("PriorityClass", "notebook-dev"),
    ])
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass",
                      "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for obj in objects:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == "gpuguard", obj["kind"]


def test_deployment_shape() -> None:
    deployment = one(render(BASE), "Deployment", "gpuguard")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["selector"]["matchLabels"] == POD_LABELS
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["labels"] == POD_LABELS
    assert pod["serviceAccountName"] == "gpuguard"
    assert pod["priorityClassName"] == "system-cluster-critical"
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/gpuguard/gpuguard:0.1.0"
    assert container["args"] == ["serve", "--config", "/etc/gpuguard/config.yaml",
                                 "--tls-cert", "/etc/gpuguard/tls/tls.crt",
                                 "--tls-key", "/etc/gpuguard/tls/tls.key", "--port", "8443",
                                 "--namespace-labels", "--dra-claims", "--node-inventory"]
    assert container["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == POD_LABELS


def test_probes_are_https_on_8443() -> None:
    (container,) = one(render(BASE), "Deployment")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert get["scheme"] == "HTTPS"
        assert ports.get(get["port"], get["port"]) == 8443


def test_security_context_is_locked_down() -> None:
    pod = one(render(BASE), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True


def test_config_and_tls_land_where_the_args_point() -> None:
    objects = render(BASE)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str, str]] = {}  # path in container -> (source kind, name, key)
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        assert "subPath" not in mount, "subPath mounts never see updates, which breaks hot reload"
        for source in volume.get("projected", {}).get("sources", []):
            for kind in ("configMap", "secret"):
                if kind in source:
                    for item in source[kind]["items"]:
                        where = f"{mount['mountPath']}/{item['path']}"
                        files[where] = (kind, source[kind]["name"], item["key"])
    assert files["/etc/gpuguard/config.yaml"] == ("configMap", "gpuguard-config", "config.yaml")
    assert files["/etc/gpuguard/tls/tls.crt"] == ("secret", "gpuguard-tls", "tls.crt")
    assert files["/etc/gpuguard/tls/tls.key"] == ("secret", "gpuguard-tls", "tls.key")
    # The read-only root filesystem still needs a writable /tmp.
    mounts = container["volumeMounts"]
    assert any(m["mountPath"] == "/tmp" and "emptyDir" in volumes[m["name"]] for m in mounts)


def test_configmap_is_generated_from_the_config_file() -> None:
    configmap = one(render(BASE), "ConfigMap", "gpuguard-config")
    assert configmap["data"]["config.yaml"] == (BASE / "config.yaml").read_text()


def test_pdb_and_service() -> None:
    objects = render(BASE)
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == POD_LABELS
    service = one(objects, "Service")
    assert service["spec"]["selector"] == POD_LABELS
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443
    assert port["targetPort"] in ("https", 8443)


def test_rbac_is_least_privilege() -> None:
    objects = render(BASE)
    role = one(objects, "ClusterRole", "gpuguard")
    rules = [r for r in role["rules"] if r["verbs"] != ["get"]]
    assert sorted(rules, key=lambda r: r["apiGroups"]) == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["list"]},  # namespace-quota's hard limits
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},  # the node inventory
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
         "resourceNames": ["gpuguard"], "verbs": ["get", "patch"]},
        {"apiGroups": ["karpenter.sh"], "resources": ["nodepools"], "verbs": ["list"]},  # autoscaled GPU pools
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates", "resourceclaims", "resourceslices"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["list"]},  # learned accelerators
        # the ServingRuntimes an InferenceService names or KServe selects by model format
        {"apiGroups": ["serving.kserve.io"], "resources": ["servingruntimes", "clusterservingruntimes"],
         "verbs": ["get", "list"]},
    ]
    # `get` on exactly the kinds whose scale subresource gpuguard validates (the workload behind a Scale) and the
    # CRDs that say where a custom resource's Scale lands, the runtimes a TrainJob names and the core objects
    # policies read (a shared claim's access modes).
    from gpuguard.webhook.objects import READABLE_CORE
    from gpuguard.workloads.kinds import KINDS

    gets = {(g, res) for r in role["rules"] if r["verbs"] == ["get"] for g in r["apiGroups"] for res in r["resources"]}
    runtimes = {(k.runtime.group, plural) for k in KINDS if k.runtime for _, _, plural in k.runtime.resources}
    core = {(group, plural) for (group, _), (_, plural) in READABLE_CORE.items()}
    crds = {("apiextensions.k8s.io", "customresourcedefinitions")}
    assert gets == {(k.group, k.plural) for k in KINDS if k.scalable} | crds | runtimes | core
    binding = one(objects, "ClusterRoleBinding", "gpuguard")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "gpuguard"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuguard", "namespace": "gpuguard"}]
    assert not of_kind(objects, "Role") and not of_kind(objects, "RoleBinding")


def test_priority_classes() -> None:
    classes = {o["metadata"]["name"]: o for o in of_kind(render(BASE), "PriorityClass")}
    assert classes["inference-critical"]["value"] == 100000
    assert classes["inference-critical"]["preemptionPolicy"] == "PreemptLowerPriority"
    # A server where the namespace grants no preemption: ahead of training in the queue, evicting nobody.
    assert classes["training-standard"]["value"] < classes["inference-standard"]["value"] < 100000
    assert classes["inference-standard"]["preemptionPolicy"] == "Never"
    assert classes["training-standard"]["value"] == 10000
    assert classes["training-standard"]["preemptionPolicy"] == "Never"
    assert classes["notebook-dev"]["value"] == 1000
    assert classes["notebook-dev"]["preemptionPolicy"] == "Never"
    # Never the cluster's default class; and not `globalDefault: false` either: that is the default, which the
    # apiserver does not store, so every `kubectl apply` would report the class "configured" (GitOps drift).
    assert not any("globalDefault" in c for c in classes.values())


def test_base_webhooks_call_the_service_and_leave_ca_bundle_to_injection() -> None:
    objects = render(BASE)
    for kind, path in (("MutatingWebhookConfiguration", "/mutate"),
                       ("ValidatingWebhookConfiguration", "/validate")):
        hooks = one(objects, kind, "gpuguard")["webhooks"]
        scale = [h for h in hooks if h["name"] == "scale.gpuguard.io"]
        assert [h["failurePolicy"] for h in scale] == (["Ignore"] if kind.startswith("Validating") else [])
        for hook in (h for h in hooks if h not in scale):
            assert hook["clientConfig"] == {
                "service": {"namespace": "gpuguard", "name": "gpuguard", "path": path, "port": 443}}
            assert hook["failurePolicy"] == "Fail"
            assert "gpuguard" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    service = one(objects, "Service")
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == ("gpuguard", "gpuguard")


# ---------------------------------------------------------------- overlays


def test_cert_manager_overlay() -> None:
    objects = render(DEPLOY / "overlays" / "cert-manager")
    issuers = {o["metadata"]["name"]: o["spec"] for o in of_kind(objects, "Issuer")}
    certificates = {o["metadata"]["name"]: o["spec"] for o in of_kind(objects, "Certificate")}
    assert issuers["gpuguard-selfsigned"] == {"selfSigned": {}}
    assert certificates["gpuguard-ca"]["isCA"] is True
    assert certificates["gpuguard-ca"]["issuerRef"]["name"] == "gpuguard-selfsigned"
    assert issuers["gpuguard-ca"] == {"ca": {"secretName": certificates["gpuguard-ca"]["secretName"]}}
    serving = certificates["gpuguard-serving"]
    assert serving["issuerRef"]["name"] == "gpuguard-ca"
    assert serving["secretName"] == "gpuguard-tls"
    assert "gpuguard.gpuguard.svc" in serving["dnsNames"]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(objects, kind)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == "gpuguard/gpuguard-serving"
    # cainjector owns caBundle, so gpuguard's ServiceAccount loses the right to patch webhooks.
    rules = one(objects, "ClusterRole")["rules"]
    assert all("admissionregistration.k8s.io" not in r["apiGroups"] for r in rules)
    assert one(objects, "Deployment")["spec"]["replicas"] == 2


def test_dev_overlay() -> None:
    objects = render(DEPLOY / "overlays" / "dev")
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in one(objects, kind)["webhooks"]:
            assert hook["failurePolicy"] == "Ignore"
            assert hook["timeoutSeconds"] <= 10
    assert one(objects, "Deployment")["spec"]["replicas"] == 1
    assert not of_kind(objects, "PodDisruptionBudget")
    assert len(of_kind(objects, "PriorityClass")) == 4


def test_network_policy_opens_only_the_webhook_port_and_the_api() -> None:
    objects = render(BASE)
    policy = one(objects, "NetworkPolicy", "gpuguard")
    pod_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()  # it selects gpuguard's pods
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = policy["spec"]["ingress"]
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert ingress["ports"] == [{"protocol": "TCP", "port": p["containerPort"]} for p in container["ports"]]
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {443, 6443, 53}
