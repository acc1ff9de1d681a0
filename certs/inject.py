"""Put the CA into the ``caBundle`` of gpuguard's webhook configurations.

The apiserver trusts the webhook's serving certificate only through ``caBundle``; a stale or
empty bundle turns every admission call into a TLS error (and, with ``failurePolicy: Fail``,
into denied pods).  The patch is a JSON patch that first *tests* each webhook's name at its
index, so a configuration edited between our read and our write fails cleanly instead of
getting a bundle on the wrong webhook.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuguard.certs.store import CertError

MUTATING = "MutatingWebhookConfiguration"
VALIDATING = "ValidatingWebhookConfiguration"
REQUEST_TIMEOUT_SECONDS = 15


class InjectError(CertError):
    """The cluster side failed (missing configurations, no access, API unreachable)."""


@dataclass(frozen=True)
class InjectResult:
    """One configuration's outcome; ``changed`` is False when its caBundle was already current."""

    kind: str
    name: str
    webhooks: int
    changed: bool


def encode_ca_bundle(ca_pem: bytes) -> str:
    """``caBundle`` is ``[]byte`` in the API, so JSON carries it as base64 of the PEM text."""
    return base64.b64encode(ca_pem).decode("ascii")


def build_ca_bundle_patch(configuration: Mapping[str, Any], ca_bundle_b64: str) -> list[dict[str, Any]]:
    """RFC 6902 ops setting ``clientConfig.caBundle`` on every webhook of ``configuration``.

    ``configuration`` is the object as JSON (camelCase keys).  Returns ``[]`` when every
    webhook already carries this bundle, so re-running inject is a no-op.  Raises
    ``InjectError`` when there is no webhook to patch.
    """
    webhooks = configuration.get("webhooks") or []
    name = (configuration.get("metadata") or {}).get("name", "?")
    if not webhooks:
        raise InjectError(f"{configuration.get('kind', 'webhook configuration')} {name!r} has no webhooks")
    ops: list[dict[str, Any]] = []
    for i, hook in enumerate(webhooks):
        client_config = hook.get("clientConfig") or {}
        if client_config.get("caBundle") == ca_bundle_b64:
            continue
        ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook.get("name")})
        if "clientConfig" not in hook:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig", "value": {}})
        # "add" on an existing member replaces it, so one op covers both empty and stale bundles.
        ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle_b64})
    return ops


def _describe_api_error(exc: Any, kind: str, name: str, verb: str) -> InjectError:
    """Turn an HTTP status into the next step for the admin (apply first, grant RBAC, retry)."""
    status = getattr(exc, "status", None)
    if status == 404:
        return InjectError(f"{kind} {name!r} not found; apply deploy/base (or the output of "
                           "`gpuguard webhook-config`) before injecting the CA")
    if status in (401, 403):
        return InjectError(f"not allowed to {verb} {kind} {name!r} (HTTP {status}); the caller needs get and "
                           "patch on mutatingwebhookconfigurations and validatingwebhookconfigurations")
    if status == 422 and verb == "patch":
        return InjectError(f"{kind} {name!r} changed while it was being patched; run the command again")
    return InjectError(f"{verb} {kind} {name!r} failed: HTTP {status} {getattr(exc, 'reason', '')}".rstrip())


def inject_ca_bundle(
    ca_pem: bytes,
    name: str = "gpuguard",
    api_client: Any = None,
    *,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> list[InjectResult]:
    """Patch ``caBundle`` into both webhook configurations called ``name``.

    Both are read before either is patched, so a missing one leaves the cluster untouched
    rather than half-updated.  Errors come back as ``InjectError`` with a one-line message.
    """
    import urllib3

    from gpuguard.kubeapi.client import ApiError, KubeConfigError, admissionregistration_v1, connect

    try:
        api_client = api_client or connect(kubeconfig, context).api
    except KubeConfigError as exc:
        raise InjectError(f"no usable Kubernetes credentials: {exc}") from None
    api = admissionregistration_v1(api_client)
    bundle = encode_ca_bundle(ca_pem)
    host = getattr(api_client.configuration, "host", "the API server")
    readers = {
        MUTATING: (api.read_mutating_webhook_configuration, api.patch_mutating_webhook_configuration),
        VALIDATING: (api.read_validating_webhook_configuration, api.patch_validating_webhook_configuration),
    }
    verb = "get"
    current_kind = MUTATING
    try:
        live: dict[str, dict[str, Any]] = {}
        for kind, (read, _patch) in readers.items():
            current_kind = kind
            # Raw JSON, not the client's models: newer clients validate models strictly and we
            # only need names and caBundle, which must survive whatever else the object holds.
            response = read(name, _request_timeout=REQUEST_TIMEOUT_SECONDS, _preload_content=False)
            live[kind] = json.loads(response.data)
        verb = "patch"
        results = []
        for kind, (_read, patch) in readers.items():
            current_kind = kind
            ops = build_ca_bundle_patch(live[kind], bundle)
            if ops:
                patch(name, ops, _request_timeout=REQUEST_TIMEOUT_SECONDS, _preload_content=False)
            results.append(InjectResult(kind, name, len(live[kind].get("webhooks") or []), bool(ops)))
        return results
    except ApiError as exc:
        raise _describe_api_error(exc, current_kind, name, verb) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise InjectError(f"cannot reach the Kubernetes API at {host}: {reason}") from None
    except (ValueError, AttributeError) as exc:  # not JSON / not an object: not an apiserver
        raise InjectError(f"unexpected answer from {host} to {verb} {current_kind} {name!r}: {exc}") from None
