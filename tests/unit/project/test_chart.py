"""deploy/chart/gpuguard: `helm lint`, and `helm template` compared with the kustomize base and overlays.

The chart is generated from deploy/'s own sources (scripts/helm_chart.py, checked by
test_generated.py); these tests render it with the real Helm (built from the Go module proxy by
tests/support/helm/build.sh) and check that the objects are the kustomize ones, value by value,
and that every value does what values.yaml says.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import CHART, helm
from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
Objects = dict[tuple[str, str], dict[str, Any]]


def _kustomize(directory: str) -> Objects:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI"):
            pytest.fail("kubectl is required in CI to render deploy/")
        pytest.skip("kubectl not installed (set CI=1 to make this a failure)")
    proc = subprocess.run([kubectl, "kustomize", str(DEPLOY / directory)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return _by_name(yaml.safe_load_all(proc.stdout))


def _by_name(documents: Any) -> Objects:
    objects: Objects = {}
    for doc in documents:
        if doc:
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"{key} rendered twice"
            objects[key] = doc
    return objects


def template(*sets: str, namespace: str = "gpuguard", extra: tuple[str, ...] = ()) -> Objects:
    args = ["template", "gpuguard", str(CHART), "--namespace", namespace, *extra]
    for item in sets:
        args += ["--set", item]
    proc = helm(*args)
    return _by_name(yaml.safe_load_all(proc.stdout))


def _without_namespace(objects: Objects) -> Objects:
    """Helm owns the release namespace (`--create-namespace`); the base declares it as an object."""
    return {key: obj for key, obj in objects.items() if key[0] != "Namespace"}


def _assert_same(chart: Objects, kustomize: Objects) -> None:
    assert sorted(chart) == sorted(kustomize)
    for key, obj in kustomize.items():
        assert chart[key] == obj, f"{key} differs between the chart and kustomize"


def test_helm_lint_passes_with_default_and_cert_manager_values() -> None:
    for extra in ([], ["--set", "certificates.mode=certManager", "--set", "serviceMonitor.enabled=true",
                       "--set", "prometheusRule.enabled=true"], ["--set", "certificates.mode=selfManaged"]):
        proc = helm("lint", "--strict", str(CHART), *extra)
        assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout, proc.stdout


def test_default_values_render_the_kustomize_base() -> None:
    _assert_same(template(), _without_namespace(_kustomize("base")))


def test_cert_manager_mode_renders_the_cert_manager_overlay() -> None:
    _assert_same(template("certificates.mode=certManager"), _without_namespace(_kustomize("overlays/cert-manager")))


def _webhooks_parsed(objects: Objects) -> Objects:
    """The self-managed webhooks ConfigMap's text parsed: Helm and kustomize print the same YAML differently."""
    key = ("ConfigMap", "gpuguard-webhooks")
    if key in objects:
        text = objects[key]["data"]["webhooks.yaml"]
        objects[key] = {**objects[key], "data": {"webhooks.yaml": [d for d in yaml.safe_load_all(text) if d]}}
    return objects


def test_self_managed_mode_renders_the_self_managed_overlay() -> None:
    chart = _webhooks_parsed(template("certificates.mode=selfManaged"))
    overlay = _without_namespace(_kustomize("overlays/self-managed"))
    # `kubectl apply -k` (client-side) copies the ConfigMap into its last-applied annotation, and an
    # object's annotations may hold 256 KiB in all: past that only `kubectl apply --server-side` works.
    assert len(json.dumps(overlay[("ConfigMap", "gpuguard-webhooks")])) < 200 * 1024
    _assert_same(chart, _webhooks_parsed(overlay))
    # What the server writes is what the other modes install; what is installed is empty.
    full = template()
    written = chart[("ConfigMap", "gpuguard-webhooks")]["data"]["webhooks.yaml"]
    assert written == [full[(kind, "gpuguard")] for kind in ("MutatingWebhookConfiguration",
                                                             "ValidatingWebhookConfiguration")]
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert chart[(kind, "gpuguard")]["webhooks"] == []
    assert ("Secret", "gpuguard-certs") in chart and "data" not in chart[("Secret", "gpuguard-certs")]


def test_self_managed_rbac_is_by_name_and_in_the_release_namespace_only() -> None:
    chart = template("certificates.mode=selfManaged", namespace="ops")
    (hooks,) = [r for r in chart[("ClusterRole", "gpuguard")]["rules"]
                if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert hooks["verbs"] == ["get", "update"] and hooks["resourceNames"] == ["gpuguard"]
    role = chart[("Role", "gpuguard-certs")]
    assert role["metadata"]["namespace"] == "ops"
    assert all(rule.get("resourceNames") and "create" not in rule["verbs"] for rule in role["rules"])
    assert chart[("RoleBinding", "gpuguard-certs")]["subjects"][0]["namespace"] == "ops"
    # The webhooks the server writes follow the release namespace and the webhook values.
    data = template("certificates.mode=selfManaged", "webhook.timeoutSeconds=7", namespace="ops")[
        ("ConfigMap", "gpuguard-webhooks")]["data"]["webhooks.yaml"]
    hooks_written = [h for doc in yaml.safe_load_all(data) for h in doc["webhooks"]]
    assert {h["clientConfig"]["service"]["namespace"] for h in hooks_written} == {"ops"}
    assert {h["timeoutSeconds"] for h in hooks_written} == {7}
    (container,) = _pod(chart)["containers"]
    assert container["args"][3:7] == ["--self-managed-certs", "gpuguard-certs", "--self-managed-dir",
                                      "/run/gpuguard/tls"]
    assert all(s.get("secret") is None for v in _pod(chart)["volumes"] for s in (v.get("projected") or {}).get(
        "sources", []))


def test_dev_values_render_the_dev_overlay() -> None:
    chart = template("replicas=1", "pdb.enabled=false", "webhook.failurePolicy=Ignore", "webhook.timeoutSeconds=5")
    _assert_same(chart, _without_namespace(_kustomize("overlays/dev")))


def test_webhooks_are_the_generators_with_only_the_templated_fields_changed() -> None:
    """URL mode, a CA, another namespace and every webhook value: exactly `gpuguard webhook-config`'s output."""
    from gpuguard.webhook.cli.match_conditions import filters_from
    from gpuguard.webhook.cli.webhook_config import build_webhook_configurations
    from gpuguard.webhook.config import load_config

    ca = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    chart = template("webhook.url=https://gpuguard.example:9443/", f"webhook.caBundle={base64.b64encode(ca).decode()}",
                     "webhook.failurePolicy=Ignore", "webhook.scaleFailurePolicy=Fail", "webhook.timeoutSeconds=7",
                     "webhook.excludedNamespaces={team-x,kube-system}", namespace="ops")
    expected = build_webhook_configurations(
        url="https://gpuguard.example:9443", ca_bundle=ca, failure_policy="Ignore", scale_failure_policy="Fail",
        timeout_seconds=7, namespace="ops", exclude_namespaces=["team-x", "kube-system"],
        filters=filters_from(load_config(str(REPO / "policies" / "default-config.yaml"))))
    for document in expected:
        assert chart[(document["kind"], "gpuguard")] == document
    hooks = chart[("ValidatingWebhookConfiguration", "gpuguard")]["webhooks"]
    assert len(hooks) > 3 and all(h["clientConfig"]["url"] == "https://gpuguard.example:9443/validate" for h in hooks)


def test_release_namespace_reaches_every_reference() -> None:
    chart = template("certificates.mode=certManager", namespace="ops")
    for (kind, name), obj in chart.items():
        if "namespace" in obj["metadata"]:
            assert obj["metadata"]["namespace"] == "ops", (kind, name)
    assert chart[("ClusterRoleBinding", "gpuguard")]["subjects"][0]["namespace"] == "ops"
    for hook in chart[("MutatingWebhookConfiguration", "gpuguard")]["webhooks"]:
        assert hook["clientConfig"]["service"]["namespace"] == "ops"
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kube-node-lease", "ops"]
    annotations = chart[("ValidatingWebhookConfiguration", "gpuguard")]["metadata"]["annotations"]
    assert annotations == {"cert-manager.io/inject-ca-from": "ops/gpuguard-serving"}
    assert "gpuguard.ops.svc" in chart[("Certificate", "gpuguard-serving")]["spec"]["dnsNames"]


def _pod(objects: Objects) -> dict[str, Any]:
    spec: dict[str, Any] = objects[("Deployment", "gpuguard")]["spec"]["template"]["spec"]
    return spec


def test_deployment_values() -> None:
    chart = template("replicas=3", "image.repository=registry.corp/gpuguard", "image.tag=1.2.3",
                     "resources.limits.memory=1Gi", "affinity=null", "nodeSelector.pool=system",
                     "tolerations[0].key=critical", "tolerations[0].operator=Exists",
                     "server.draClaims=false", "server.nodeInventory=false", "server.extraArgs={--log-format,json}",
                     "priorityClassName=high")
    assert chart[("Deployment", "gpuguard")]["spec"]["replicas"] == 3
    pod = _pod(chart)
    (container,) = pod["containers"]
    assert container["image"] == "registry.corp/gpuguard:1.2.3"
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert container["resources"]["requests"] == _pod(template())["containers"][0]["resources"]["requests"]
    assert "affinity" not in pod
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "critical", "operator": "Exists"}]
    assert pod["priorityClassName"] == "high"
    assert container["args"][-3:] == ["--namespace-labels", "--log-format", "json"]
    assert "--dra-claims" not in container["args"] and "--node-inventory" not in container["args"]


def test_config_value_replaces_the_shipped_config(tmp_path: Path) -> None:
    default = template()[("ConfigMap", "gpuguard-config")]["data"]["config.yaml"]
    assert default == (REPO / "policies" / "default-config.yaml").read_text()
    own = ("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\n"
           "# open: allow what can't be judged\nfailureMode: open\n")
    (tmp_path / "config.yaml").write_text(own)
    chart = template(extra=("--set-file", f"config={tmp_path / 'config.yaml'}"))
    assert chart[("ConfigMap", "gpuguard-config")]["data"]["config.yaml"] == own


def test_the_values_grant_recipe_is_a_config_that_grants_what_it_says(tmp_path: Path) -> None:
    """values.yaml's commented grant recipe: the labels it names select the shipped profiles, and its own config,
    given as the chart's ``config``, grants preemption to exactly the namespaces it labels."""
    from gpuguard.webhook.config import load_config

    values = (CHART / "values.yaml").read_text()
    shipped = load_config(None)
    for profile in ("serving", "sandbox"):
        assert f"gpuguard.io/profile={profile}" in values
        assert shipped.policies_for("ns", {"gpuguard.io/profile": profile})[0] == profile
    lines = values[values.index("#   config: |"):values.index('config: ""')].splitlines()[1:]
    own = "\n".join(line.removeprefix("#     ") for line in lines) + "\n"
    (tmp_path / "config.yaml").write_text(own)
    config = load_config(str(tmp_path / "config.yaml"))
    name, policies = config.policies_for("llm", {"team-type": "serving"})
    assert name == "serving-teams"
    assert policies.settings("workload-class").allow_escalation_to == ["inference"]
    assert config.policies_for("llm", {})[0] is None  # an unlabelled namespace grants nothing
    chart = template(extra=("--set-file", f"config={tmp_path / 'config.yaml'}"))
    assert chart[("ConfigMap", "gpuguard-config")]["data"]["config.yaml"] == own


def test_toggles_drop_and_add_objects() -> None:
    off = template("pdb.enabled=false", "networkPolicy.enabled=false", "priorityClasses.create=false",
                   "resourceQuota.create=false")
    assert {kind for kind, _ in off}.isdisjoint({"PodDisruptionBudget", "NetworkPolicy", "PriorityClass",
                                                 "ResourceQuota"})
    assert template("pdb.minAvailable=2")[("PodDisruptionBudget", "gpuguard")]["spec"]["minAvailable"] == 2
    default = template()
    assert not {("ServiceMonitor", "gpuguard"), ("PrometheusRule", "gpuguard")} & set(default)
    on = template("serviceMonitor.enabled=true", "prometheusRule.enabled=true", "serviceMonitor.interval=15s")
    monitor = on[("ServiceMonitor", "gpuguard")]
    service = default[("Service", "gpuguard")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert {e["interval"] for e in monitor["spec"]["endpoints"]} == {"15s"}
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text())
    assert on[("PrometheusRule", "gpuguard")]["spec"] == rules
    source = DEPLOY / "monitoring" / "rules.yaml"
    if source.is_file():  # the monitoring pack's rule file, verbatim
        assert rules == yaml.safe_load(source.read_text())


@pytest.mark.parametrize(("value", "message", "schema"), [
    ("certificates.mode=byHand", "certificates.mode must be secret, certManager or selfManaged",
     "at '/certificates/mode': value must be one of"),
    ("webhook.failurePolicy=Sometimes", "webhook.failurePolicy must be Fail or Ignore",
     "at '/webhook/failurePolicy': value must be one of"),
    ("webhook.timeoutSeconds=60", "webhook.timeoutSeconds must be 1-30", "at '/webhook/timeoutSeconds': maximum"),
])
def test_values_the_apiserver_would_refuse_fail_to_render(value: str, message: str, schema: str) -> None:
    """The schema refuses them, naming the value; the templates' own check still does where it is skipped."""
    proc = helm("template", "gpuguard", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0 and schema in proc.stderr, proc.stderr
    proc = helm("template", "gpuguard", str(CHART), "--set", value, "--skip-schema-validation", check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


@pytest.mark.parametrize(("value", "refused"), [
    ("replica=3", "at '': additional properties 'replica' not allowed"),
    ("webhook.failurPolicy=Ignore", "at '/webhook': additional properties 'failurPolicy' not allowed"),
    ("resources.limit.cpu=2", "at '/resources': additional properties 'limit' not allowed"),
    ("scan.enable=true", "at '/scan': additional properties 'enable' not allowed"),
    ("tolerations[0].keys=gpu", "at '/tolerations/0': additional properties 'keys' not allowed"),
    ("replicas=two", "at '/replicas': got string, want integer"),
])
def test_an_unknown_or_mistyped_value_is_refused_by_lint_and_template(value: str, refused: str) -> None:
    """values.schema.json closes every level of the chart's values: a typo is an error, not a value Helm ignores."""
    proc = helm("template", "gpuguard", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0 and refused in proc.stderr, proc.stderr
    proc = helm("lint", "--strict", str(CHART), "--set", value, check=False)
    assert proc.returncode != 0 and refused in proc.stdout + proc.stderr, proc.stdout
    assert "1 chart(s) linted, 1 chart(s) failed" in proc.stdout + proc.stderr


def test_the_defaults_and_every_documented_kind_of_value_pass_the_schema(tmp_path: Path) -> None:
    """The shipped values.yaml given back as a file, and values of every shape the chart takes, are accepted."""
    proc = helm("lint", "--strict", str(CHART), "-f", str(CHART / "values.yaml"))
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout, proc.stdout
    own = {"global": {"imageRegistry": "r"}, "pdb": {"minAvailable": "50%"}, "affinity": None, "scan": None,
           "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}],
           "resources": {"requests": {"cpu": 0.5, "memory": "1Gi"}}, "webhook": {"url": "https://x.example:9443"}}
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(own))
    rendered = template(extra=("-f", str(tmp_path / "own.yaml")))
    assert rendered[("PodDisruptionBudget", "gpuguard")]["spec"]["minAvailable"] == "50%"


def _closed_everywhere(schema: dict[str, Any], where: str = "") -> list[str]:
    """Where an object of the chart's own lists its properties but leaves other keys open."""
    open_at = []
    if "properties" in schema and schema.get("additionalProperties") is not False:
        open_at.append(where or "/")
    for key, sub in schema.get("properties", {}).items():
        if key != "global":
            open_at += _closed_everywhere(sub, f"{where}/{key}")
    if isinstance(schema.get("items"), dict):
        open_at += _closed_everywhere(schema["items"], f"{where}/items")
    return open_at


def test_the_schema_and_the_chart_readme_cover_every_value_with_its_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert _closed_everywhere(schema) == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()

    def leaves(tree: dict[str, Any], node: dict[str, Any], prefix: str = "") -> None:
        for key, value in tree.items():
            sub = node["properties"][key]
            if "default" not in sub:  # a group of values (image, webhook, scan ...)
                leaves(value, sub, f"{prefix}{key}.")
                continue
            assert sub["default"] == value and sub["description"], f"{prefix}{key}"
            assert f"| `{prefix}{key}` | " in readme, f"{prefix}{key} is not in the chart's README.md"

    leaves(values, schema)


def test_every_chart_file_is_generated_or_one_of_the_hand_written_few() -> None:
    """The generated-files check covers the chart: nothing in it escapes ``scripts/generate.py --check``."""
    from tests.support.paths import load_script

    generate = load_script("generate")
    generated = {path for path in generate.helm_chart() if path.startswith("deploy/chart/")}
    hand_written = {f"deploy/chart/gpuguard/{name}" for name in
                    (".helmignore", "templates/_helpers.tpl", "templates/NOTES.txt")}
    on_disk = {p.relative_to(REPO).as_posix() for p in CHART.rglob("*") if p.is_file()}
    assert on_disk == generated | hand_written
    assert {"deploy/chart/gpuguard/Chart.yaml", "deploy/chart/gpuguard/values.yaml",
            "deploy/chart/gpuguard/templates/webhookconfigurations.yaml"} <= generated


def test_scan_enabled_renders_deploy_scan_in_the_release_namespace() -> None:
    assert not {key for key in template() if key[1].startswith("gpuguard-scan")}
    on = template("scan.enabled=true")
    scan = _kustomize("scan")
    for key, obj in scan.items():
        assert on[key] == obj, f"{key} differs between the chart and deploy/scan"
    proc = helm("lint", "--strict", str(CHART), "--set", "scan.enabled=true")
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout, proc.stdout
    moved = template("scan.enabled=true", "scan.replicas=1", namespace="ml-platform")
    deployment = moved[("Deployment", "gpuguard-scan")]
    assert deployment["spec"]["replicas"] == 1 and deployment["metadata"]["namespace"] == "ml-platform"
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--lease-namespace") + 1] == "ml-platform"
    assert moved[("Role", "gpuguard-scan-lease")]["metadata"]["namespace"] == "ml-platform"
    assert args[args.index("--report-api") + 1] == "policyreports"
    opened = template("scan.enabled=true", "scan.reportApi=openreports")[("Deployment", "gpuguard-scan")]
    opened_args = opened["spec"]["template"]["spec"]["containers"][0]["args"]
    assert opened_args[opened_args.index("--report-api") + 1] == "openreports"
    for binding in (("ClusterRoleBinding", "gpuguard-scan"), ("RoleBinding", "gpuguard-scan-lease")):
        assert moved[binding]["subjects"][0]["namespace"] == "ml-platform"
    assert ("ServiceMonitor", "gpuguard-scan") not in on
    monitored = template("scan.enabled=true", "serviceMonitor.enabled=true")
    pack = _kustomize("monitoring")
    assert monitored[("ServiceMonitor", "gpuguard-scan")] == pack[("ServiceMonitor", "gpuguard-scan")]
    service = monitored[("Service", "gpuguard-scan-metrics")]
    monitor = monitored[("ServiceMonitor", "gpuguard-scan")]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]


def test_values_of_a_release_from_before_the_scan_still_render() -> None:
    """`helm upgrade --reuse-values` of a release installed before `scan` existed has no `scan` key at all:
    the chart must render it as scan off, not fail on a nil map."""
    without_scan = template("scan=null", "serviceMonitor.enabled=true")
    assert ("Deployment", "gpuguard") in without_scan
    assert not {key for key in without_scan if key[1].startswith("gpuguard-scan")}
