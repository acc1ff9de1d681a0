"""What a self-managed server may write into the cluster's admission chain: gpuguard's own webhooks, nothing else.

In self-managed mode the server copies the webhooks of the ``gpuguard-webhooks`` ConfigMap into its two webhook
configurations.  Whoever can edit that ConfigMap must not be able to register, through gpuguard's identity, a
``url:`` webhook on Secrets (every Secret in the cluster sent elsewhere) or a ``Fail`` webhook on ``*/*`` (the
cluster's writes held hostage).  So every webhook of the template must be gpuguard's own:

- its ``clientConfig`` calls gpuguard: its own Service in its own namespace, or a URL whose host its serving
  certificate is issued for, on ``/mutate`` or ``/validate``;
- its rules cover only the kinds gpuguard judges (the kind table, the config's own kinds and their ``scale``
  subresources), with no wildcard, for ``CREATE`` and ``UPDATE`` only;
- its name ends with ``.gpuguard.io``.

A template that breaks any of these is refused whole (nothing is written) and said, in the log and in
``gpuguard_selfmanaged_cert_steps_total{step="webhooks",result="refused"}``, which an alert watches.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from gpuguard.workloads.kinds import all_kinds

PATHS = frozenset({"/mutate", "/validate"})
OPERATIONS = frozenset({"CREATE", "UPDATE"})
NAME_SUFFIX = ".gpuguard.io"


def _resources() -> frozenset[tuple[str, str]]:
    """(API group, resource) gpuguard may be sent: every kind's plural, and ``plural/scale`` where it scales."""
    out: set[tuple[str, str]] = set()
    for spec in all_kinds():
        out.add((spec.group, spec.plural))
        out.add((spec.group, f"{spec.plural}/scale"))
    return frozenset(out)


def template_problems(configurations: Iterable[dict[str, Any]], namespace: str, service: str,
                      hosts: Iterable[str]) -> list[str]:
    """What in the webhook configurations of the template is not gpuguard's own ([] when all is)."""
    allowed = _resources()
    host_names = frozenset(hosts)
    problems: list[str] = []
    for configuration in configurations:
        for i, hook in enumerate(configuration.get("webhooks") or []):
            name = hook.get("name") if isinstance(hook, dict) else None
            where = f"{configuration.get('kind')} webhook {name or i}"
            if not isinstance(hook, dict):
                problems.append(f"{where}: not a mapping")
                continue
            if not isinstance(name, str) or not name.endswith(NAME_SUFFIX):
                problems.append(f"{where}: its name must end with {NAME_SUFFIX}")
            problems += [f"{where}: {p}" for p in _client_problems(hook.get("clientConfig"), namespace, service,
                                                                   host_names)]
            problems += [f"{where}: {p}" for p in _rule_problems(hook.get("rules"), allowed)]
    return problems


def _client_problems(client: Any, namespace: str, service: str, hosts: frozenset[str]) -> list[str]:
    if not isinstance(client, dict):
        return ["no clientConfig"]
    target = client.get("service")
    url = client.get("url")
    if isinstance(target, dict) and url is None:
        if target.get("namespace") != namespace or target.get("name") != service:
            return [f"clientConfig.service is {target.get('namespace')}/{target.get('name')}, not gpuguard's "
                    f"{namespace}/{service}"]
        path = target.get("path")
    elif isinstance(url, str) and target is None:
        parts = urlsplit(url)
        if parts.scheme != "https" or parts.hostname not in hosts:
            return [f"clientConfig.url {url!r} is not gpuguard's (https to a host its certificate names: "
                    f"{', '.join(sorted(hosts)) or 'none'})"]
        path = parts.path
    else:
        return ["clientConfig must name either gpuguard's Service or its URL"]
    return [] if path in PATHS else [f"clientConfig path {path!r} is not {' or '.join(sorted(PATHS))}"]


def _rule_problems(rules: Any, allowed: frozenset[tuple[str, str]]) -> list[str]:
    if not isinstance(rules, list) or not rules:
        return ["no rules"]
    problems = []
    for rule in rules:
        if not isinstance(rule, dict):
            problems.append("a rule is not a mapping")
            continue
        operations = rule.get("operations") or []
        if not set(operations) <= OPERATIONS:
            problems.append(f"operations {operations} beyond {sorted(OPERATIONS)}")
        groups, resources = rule.get("apiGroups") or [], rule.get("resources") or []
        foreign = [f"{group or 'core'}/{resource}" for group in groups for resource in resources
                   if (group, resource) not in allowed]
        if foreign:
            problems.append(f"rules cover {', '.join(foreign[:3])}, which gpuguard does not judge")
    return problems
