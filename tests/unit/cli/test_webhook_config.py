"""webhook/cli/webhook_config.py: the generated Mutating/ValidatingWebhookConfiguration."""

from __future__ import annotations

import argparse
import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuguard.certs import write_bundle
from gpuguard.webhook.cli import webhook_config as wc
from gpuguard.workloads.kinds import KINDS


def _build(**kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    kwargs.setdefault("service", ("gpuguard", "gpuguard"))
    mutating, validating = wc.build_webhook_configurations(**kwargs)
    return mutating, validating


def _hooks(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The object webhooks, one per API group of the kind table (the validating configuration's last
    one judges ``scale`` apart)."""
    verb = wc.MUTATE if config["kind"].startswith("Mutating") else wc.VALIDATE
    expected = [wc.webhook_name(group, verb) for group, _ in wc.kind_groups()]
    names = [h["name"] for h in config["webhooks"]]
    assert names == (expected if verb == wc.MUTATE else [*expected, wc.SCALE_WEBHOOK_NAME])
    return config["webhooks"][:len(expected)]


def _hook(config: dict[str, Any]) -> dict[str, Any]:
    """The first object webhook (core: Pods); every object webhook shares the fields the tests read."""
    hooks = _hooks(config)
    for hook in hooks[1:]:
        for field in ("clientConfig", "failurePolicy", "timeoutSeconds", "namespaceSelector", "sideEffects"):
            assert hook[field] == hooks[0][field], field
    return hooks[0]


def _intercepted_by_all(config: dict[str, Any]) -> set[tuple[str, str, str]]:
    """What the object webhooks intercept together; no two intercept the same resource."""
    seen: set[tuple[str, str, str]] = set()
    for hook in _hooks(config):
        mine = _intercepted(hook)
        assert not mine & seen, mine & seen
        seen |= mine
    return seen


def _intercepted(hook: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every (group, version, resource) the webhook's rules match."""
    return {
        (group, version, resource)
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for version in rule["apiVersions"]
        for resource in rule["resources"]
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuguard")
    wc.register(parser.add_subparsers(dest="command"))
    return parser


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(["webhook-config", *argv])
    return int(args.func(args))


def test_two_configurations_of_the_right_kinds() -> None:
    mutating, validating = _build()
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    assert mutating["apiVersion"] == validating["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert mutating["metadata"]["name"] == validating["metadata"]["name"] == "gpuguard"
    assert _hook(mutating)["name"] == "core.mutate.gpuguard.io"
    assert _hook(validating)["name"] == "core.validate.gpuguard.io"
    assert wc.webhook_name("kubeflow.org", wc.VALIDATE) == "kubeflow.org.validate.gpuguard.io"


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: f"{s.group or 'core'}/{s.kind}")
def test_every_kind_is_intercepted_by_both_webhooks(spec: Any) -> None:
    for config in _build():
        matched = _intercepted_by_all(config)
        for version in spec.versions:
            assert (spec.group, version, spec.plural) in matched, (config["kind"], spec.kind, version)


def test_pods_are_always_intercepted() -> None:
    for config in _build():
        assert ("", "v1", "pods") in _intercepted(_hook(config))
        # ... by the core group's webhook: the only one whose condition a Pod's create evaluates.
        assert all(("", "v1", "pods") not in _intercepted(h) for h in _hooks(config)[1:])


def test_rules_intercept_no_version_a_kind_does_not_declare() -> None:
    declared = {(s.group, v, s.plural) for s in KINDS for v in s.versions} | {("", "v1", "pods")}
    declared |= {(s.group, v, f"{s.plural}/scale") for s in KINDS if s.scale_replicas for v in s.versions}
    for config in _build():
        assert _intercepted_by_all(config) <= declared


def test_operations_per_webhook() -> None:
    mutating, validating = _build()
    for config in (mutating, validating):
        for hook in _hooks(config):
            for rule in hook["rules"]:
                assert rule["operations"] == ["CREATE", "UPDATE"] and rule["scope"] == "Namespaced"


def test_common_webhook_fields() -> None:
    mutating, validating = _build()
    for config in (mutating, validating):
        hook = _hook(config)
        assert hook["sideEffects"] == "None"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["matchPolicy"] == "Equivalent"
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == 10
    assert all(h["reinvocationPolicy"] == "IfNeeded" for h in _hooks(mutating))
    assert all("reinvocationPolicy" not in h for h in validating["webhooks"])


def test_namespace_selector_spares_system_and_gpuguard_namespaces() -> None:
    for config in _build(namespace="guard"):
        selector = _hook(config)["namespaceSelector"]
        assert selector == {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn",
            "values": ["kube-system", "kube-node-lease", "guard"],
        }]}


@pytest.mark.parametrize("timeout", [1, 10, 30])
def test_timeout_within_bounds(timeout: int) -> None:
    for config in _build(timeout_seconds=timeout):
        assert _hook(config)["timeoutSeconds"] == timeout


@pytest.mark.parametrize("timeout", [0, -1, 31, 60])
def test_timeout_out_of_bounds_is_rejected(timeout: int) -> None:
    with pytest.raises(wc.WebhookConfigError, match="between 1 and 30"):
        _build(timeout_seconds=timeout)


def test_failure_policy_ignore_and_invalid() -> None:
    for config in _build(failure_policy="Ignore"):
        assert _hook(config)["failurePolicy"] == "Ignore"
    with pytest.raises(wc.WebhookConfigError):
        _build(failure_policy="Maybe")


def test_service_client_config() -> None:
    mutating, validating = _build(service=("ops", "guard"), port=8443)
    assert _hook(mutating)["clientConfig"] == {
        "service": {"namespace": "ops", "name": "guard", "path": "/mutate", "port": 8443}}
    assert _hook(validating)["clientConfig"]["service"]["path"] == "/validate"


def test_url_client_config_appends_paths() -> None:
    mutating, validating = wc.build_webhook_configurations(url="https://127.0.0.1:9443/")
    assert _hook(mutating)["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate"}
    assert _hook(validating)["clientConfig"] == {"url": "https://127.0.0.1:9443/validate"}


@pytest.mark.parametrize("url", ["http://127.0.0.1:9443", "https://x/?a=b", "https://x/#f", "https://u:p@x/",
                                 "x"])
def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(wc.WebhookConfigError):
        wc.build_webhook_configurations(url=url)


def test_exactly_one_target() -> None:
    with pytest.raises(wc.WebhookConfigError):
        wc.build_webhook_configurations()
    with pytest.raises(wc.WebhookConfigError):
        wc.build_webhook_configurations(url="https://x", service=("a", "b"))


def test_ca_bundle_is_base64_of_pem_or_absent() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    for config in _build(ca_bundle=pem):
        assert base64.b64decode(_hook(config)["clientConfig"]["caBundle"]) == pem
    for config in _build():
        assert "caBundle" not in _hook(config)["clientConfig"]


def test_render_yaml_round_trips() -> None:
    documents = wc.build_webhook_configurations(service=("gpuguard", "gpuguard"))
    text = wc.render_yaml(documents)
    assert text.startswith("# Generated by `gpuguard webhook-config`")
    assert list(yaml.safe_load_all(text)) == documents


# ---------------------------------------------------------------- CLI


def test_cli_with_url_and_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_bundle(tmp_path / "pki", "gpuguard", "gpuguard", ["127.0.0.1"])
    assert _run(["--url", "https://127.0.0.1:8443", "--ca", str(paths.ca_cert), "--timeout", "5",
                 "--failure-policy", "Ignore"]) == 0
    mutating, validating = yaml.safe_load_all(capsys.readouterr().out)
    assert _hook(mutating)["clientConfig"]["url"] == "https://127.0.0.1:8443/mutate"
    assert base64.b64decode(_hook(validating)["clientConfig"]["caBundle"]) == paths.ca_cert.read_bytes()
    assert _hook(validating)["timeoutSeconds"] == 5
    assert _hook(validating)["failurePolicy"] == "Ignore"
    assert _hook(validating)["namespaceSelector"]["matchExpressions"][0]["values"][-1] == "gpuguard"


def test_cli_service_namespace_defaults_the_exclusion(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--service", "guard-system/gpuguard"]) == 0
    mutating, _ = yaml.safe_load_all(capsys.readouterr().out)
    assert _hook(mutating)["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "kube-system", "kube-node-lease", "guard-system"]
    assert _hook(mutating)["clientConfig"]["service"]["namespace"] == "guard-system"


@pytest.mark.parametrize("argv", [
    ["--service", "gpuguard/gpuguard", "--timeout", "31"],
    ["--service", "gpuguard/gpuguard", "--timeout", "0"],
    ["--url", "http://127.0.0.1:8443"],
    ["--url", "https://127.0.0.1:8443", "--port", "8443"],
    ["--service", "gpuguard/gpuguard", "--ca", "/nonexistent/ca.crt"],
])
def test_cli_bad_values_exit_2_without_traceback(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("gpuguard: error:") and "Traceback" not in captured.err
    assert captured.out == ""


def test_cli_refuses_a_private_key_as_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = write_bundle(tmp_path / "pki", "gpuguard", "gpuguard")
    assert _run(["--service", "gpuguard/gpuguard", "--ca", str(paths.ca_key)]) == 2
    assert "private key" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    [],
    ["--service", "gpuguard"],
    ["--service", "a/b", "--url", "https://x"],
    ["--service", "a/b", "--failure-policy", "Sometimes"],
    ["--service", "a/b", "--timeout", "ten"],
])
def test_cli_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["webhook-config", *argv])
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_registered_in_the_gpuguard_entry_point() -> None:
    from gpuguard.webhook import main

    assert main.VERBS["webhook-config"].module == "gpuguard.webhook.cli.webhook_config"


def test_scale_subresources_are_validated_not_mutated() -> None:
    mutating, validating = _build()
    scaled = {s.plural for s in KINDS if s.scalable}  # declared, or a custom resource whose CRD may declare it
    assert scaled >= {"deployments", "statefulsets", "replicasets", "leaderworkersets", "tfjobs", "models"}
    assert not scaled & {"jobs", "cronjobs", "daemonsets", "pods"} - {s.plural for s in KINDS
                                                                    if not s.validated_by_apiserver}
    scale_hook = validating["webhooks"][-1]
    assert scale_hook["name"] == wc.SCALE_WEBHOOK_NAME and scale_hook["failurePolicy"] == "Ignore"
    assert {r for rule in scale_hook["rules"] for r in rule["resources"]} == {f"{p}/scale" for p in scaled}
    assert all(rule["operations"] == ["UPDATE"] for rule in scale_hook["rules"])
    for hook in (*_hooks(mutating), *_hooks(validating)):  # objects only: a CPU workload's scale never waits on Fail
        assert not any(r.endswith("/scale") for rule in hook["rules"] for r in rule["resources"])
    assert _build(scale_failure_policy="Fail")[1]["webhooks"][-1]["failurePolicy"] == "Fail"


def test_controller_and_finalizer_only_updates_are_kept_away() -> None:
    from gpuguard.webhook.cli.match_conditions import (
        CONTROLLER_REQUESTS,
        METADATA_ONLY_UPDATES,
        Filters,
        blast_radius_conditions,
    )
    from gpuguard.workloads.kinds import core

    job_controller = "system:serviceaccount:kube-system:job-controller"
    edge = (job_controller, ("batch", "Job"), ("", "Pod"))
    parts = {c["name"]: c["expression"] for c in blast_radius_conditions([job_controller], [edge], [core.POD])}
    assert f"'{job_controller}'" in parts[CONTROLLER_REQUESTS]
    # Its creates only of what it makes for the owner kind it makes it for: the engine's two facts.
    assert f"'{job_controller}|batch/v1|Job'" in parts[CONTROLLER_REQUESTS]
    for field in ("spec", "labels", "annotations", "ownerReferences"):
        assert field in parts[METADATA_ONLY_UPDATES]
    # Across several kinds the created resource is part of the key.
    several = blast_radius_conditions([job_controller], [edge], KINDS)[0]["expression"]
    assert f"'{job_controller}|batch/v1|Job|pods/'" in several
    # Without create edges (trustControllerPods off) only its updates are kept away.
    updates_only = blast_radius_conditions([job_controller])[0]["expression"]
    assert "request.operation != 'UPDATE'" in updates_only and "ownerReferences" not in updates_only
    filters = Filters(patterns=("nvidia.com/gpu",), controller_users=(job_controller,), controller_creates=(edge,))
    mutating, validating = _build(filters=filters)
    for hook in (*_hooks(mutating), *_hooks(validating)):
        (merged,) = hook["matchConditions"]  # one condition: the apiserver evaluates every one of a webhook
        assert f"'{job_controller}'" in merged["expression"] and "oldObject" in merged["expression"]
        assert ("|batch/v1|Job" in merged["expression"]) == (hook["name"].startswith("core.")), hook["name"]
    assert "matchConditions" not in validating["webhooks"][-1], "the scale webhook's requests are all Scales"


def test_the_shipped_creates_kept_away_are_the_edges_gpuguard_leaves_alone() -> None:
    from gpuguard.webhook.config import load_config

    controllers = load_config(None).controllers
    edges = controllers.left_alone()
    assert ("system:serviceaccount:kube-system:replicaset-controller", ("apps", "ReplicaSet"), ("", "Pod")) in edges
    # The Trainer's JobSet is derived from a runtime and judged when it is created: never kept away.
    assert not any(child == ("jobset.x-k8s.io", "JobSet") and owner[1] == "TrainJob" for _, owner, child in edges)
    for hook in _hooks(_build()[0]):
        expression = hook["matchConditions"][0]["expression"]
        assert "kubeflow-trainer-controller-manager|trainer.kubeflow.org" not in expression


def test_generated_yaml_has_no_aliases() -> None:
    """Shared dicts would be written as YAML anchors (&id001 / *id001): legal, but unreadable in a review."""
    text = wc.render_yaml(_build())
    assert "&id" not in text and "*id" not in text


def test_with_trust_controller_pods_off_controllers_creates_reach_gpuguard(tmp_path) -> None:
    """The engine then validates what controllers create, so the conditions must send it."""
    from tests.support.server import run_cli

    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\ntrustControllerPods: false\n")
    off = run_cli("webhook-config", "--service", "gpuguard/gpuguard", "--config", str(config))
    on = run_cli("webhook-config", "--service", "gpuguard/gpuguard")
    assert off.returncode == 0 == on.returncode, off.stderr + on.stderr
    assert "|apps/v1|ReplicaSet" in on.stdout and "|apps/v1|ReplicaSet" not in off.stdout
    assert "system:serviceaccount:kube-system:job-controller" in off.stdout  # its updates still kept away
