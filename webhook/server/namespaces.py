"""Namespace labels for profile matching, read from the API and cached.

The AdmissionReview does not carry the namespace's labels, so profiles that select
namespaces by label need a lookup.  It is only made when ``--namespace-labels`` is on and
the config has such a profile; a failed lookup is logged and answered with the last known
labels (or none) and retried after a short back-off, so an API hiccup never stalls admission.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuguard.webhook.server import logs


class NamespaceLabels:
    """A bounded TTL cache in front of ``read_namespace``."""

    TTL = 60.0
    ERROR_TTL = 5.0
    TIMEOUT = 2.0
    MAX_ENTRIES = 10_000

    def __init__(self, api: Any) -> None:
        self._api = api  # CoreV1Api (or anything with read_namespace)
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None) -> NamespaceLabels:
        from gpuguard.kubeapi.client import connect, core_v1

        return cls(core_v1(connect(kubeconfig).api))

    def _read(self, namespace: str) -> dict[str, str]:
        ns = self._api.read_namespace(namespace, _request_timeout=self.TIMEOUT)
        return dict(getattr(ns.metadata, "labels", None) or {})

    async def get(self, namespace: str | None) -> dict[str, str]:
        if not namespace:
            return {}
        now = time.monotonic()
        hit = self._cache.get(namespace)
        if hit and hit[0] > now:
            return hit[1]
        try:
            labels = await asyncio.wait_for(asyncio.to_thread(self._read, namespace), self.TIMEOUT + 0.5)
            expires = now + self.TTL
        except Exception as exc:
            logs.server_logger().warning("namespace labels lookup failed", extra={
                "namespace": namespace, "exc_type": type(exc).__name__})
            labels, expires = (hit[1] if hit else {}), now + self.ERROR_TTL
        if len(self._cache) >= self.MAX_ENTRIES:
            self._cache.clear()
        self._cache[namespace] = (expires, labels)
        return labels


def profiles_use_labels(config: Any) -> bool:
    """Whether any profile selects namespaces by label (else the lookup is never needed)."""
    profiles = getattr(config, "profiles", None)
    if profiles is None:
        return True
    if getattr(getattr(config, "custom", None), "uses_namespace_labels", False):  # customPolicies read them
        return True
    return any(getattr(getattr(p, "match", None), "namespace_labels", None) for p in profiles)
