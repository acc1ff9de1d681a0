"""The webhook's cached watch of DRA ResourceClaimTemplates and ResourceClaims.

``gpuguard serve --dra-claims`` starts one per process (``start_shared_watch``) and registers
it as the claim source of every engine the process builds (``gpuguard.workloads.claims.set_shared``), so
a config reload keeps it.  Reviews only read its dict; the apiserver is called from the watch
threads, never inside a review.  RBAC: ``list`` and ``watch`` on both kinds
(``deploy/base/rbac.yaml``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpuguard.kubeapi.client import apis, custom_objects, watcher
from gpuguard.workloads.claims import (
    GROUP,
    PLURALS,
    VERSIONS,
    ClaimKind,
    DeviceRequest,
    claim_spec_of,
    device_requests,
    set_shared,
)

log = logging.getLogger("gpuguard.claims")


class ClaimWatch:
    """A cached list+watch of ResourceClaimTemplates and ResourceClaims, for the webhook.

    One daemon thread per kind lists, then watches from the list's resourceVersion, and
    re-lists after an error or an expired watch (410) with a capped back-off.  Lookups read a
    dict (no lock needed: each update replaces one key, which is atomic in CPython).  Only
    the device requests are kept, not whole objects.
    """

    def __init__(self, api_client: Any, version: str | None = None):
        self._api_client = api_client
        self._version = version
        self._store: dict[tuple[str, str | None, str], list[DeviceRequest]] = {}
        self._synced: dict[str, bool] = {kind: False for kind in PLURALS}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.error: str | None = None

    # ------------------------------------------------------------------ ClaimSource
    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        return self._store.get((kind, namespace, name))

    def why_unknown(self) -> str:
        if self.error:
            return f"the claim watch is failing ({self.error})"
        if not all(self._synced.values()):
            return "the claim watch has not synced yet"
        return "no such object in the namespace"

    @property
    def synced(self) -> bool:
        return all(self._synced.values())

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ClaimWatch:
        api = custom_objects(self._api_client)
        version = self._version or self._served_version()
        for kind, plural in PLURALS.items():
            thread = threading.Thread(target=self._run, args=(api, version, kind, plural), daemon=True,
                                      name=f"gpuguard-watch-{plural}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()

    def _served_version(self) -> str:
        try:
            groups = apis(self._api_client).get_api_versions().groups or []
        except Exception as exc:  # noqa: BLE001 - any API failure: fall back and let the watch report it
            self.error = f"API discovery failed: {type(exc).__name__}"
            return VERSIONS[-1]
        for group in groups:
            if group.name == GROUP:
                served = {v.version for v in group.versions or []}
                for version in VERSIONS:
                    if version in served:
                        return version
        self.error = f"the apiserver does not serve {GROUP}"
        return VERSIONS[-1]

    def _run(self, api: Any, version: str, kind: str, plural: str) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                listing = api.list_cluster_custom_object(GROUP, version, plural)
                fresh = {}
                for item in listing.get("items", []):
                    item["kind"] = kind
                    fresh[self._key(kind, item)] = device_requests(claim_spec_of(item))
                for key in [k for k in self._store if k[0] == kind and k not in fresh]:
                    self._store.pop(key, None)
                self._store.update(fresh)
                self._synced[kind] = True
                self.error = None
                delay = 1.0
                resource_version = listing.get("metadata", {}).get("resourceVersion")
                stream = watcher().stream(api.list_cluster_custom_object, GROUP, version, plural,
                                              resource_version=resource_version, timeout_seconds=300)
                for event in stream:
                    if self._stop.is_set():
                        return
                    obj = event.get("object")
                    if not isinstance(obj, dict) or event.get("type") == "ERROR":
                        break  # e.g. 410 Gone: list again
                    obj["kind"] = kind
                    if event.get("type") == "DELETED":
                        self._store.pop(self._key(kind, obj), None)
                    else:
                        self._store[self._key(kind, obj)] = device_requests(claim_spec_of(obj))
            except Exception as exc:  # noqa: BLE001 - keep watching; lookups report the failure
                self.error = f"{plural}: {type(exc).__name__}"
                log.warning("watching %s failed (%s); retrying in %.0f s", plural, type(exc).__name__, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)

    @staticmethod
    def _key(kind: str, obj: dict) -> tuple[str, str | None, str]:
        meta = obj.get("metadata") or {}
        return kind, meta.get("namespace"), str(meta.get("name", ""))


def start_shared_watch(api_client: Any, wait_seconds: float = 10.0) -> ClaimWatch:
    """Start the process's claim watch, wait (bounded) for its first listing, and register it."""
    watch = ClaimWatch(api_client).start()
    deadline = time.monotonic() + wait_seconds
    while not watch.synced and time.monotonic() < deadline:
        time.sleep(0.05)
    set_shared(watch)
    return watch
