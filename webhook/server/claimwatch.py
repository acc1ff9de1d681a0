"""The webhook's cached watch of DRA ResourceClaimTemplates and ResourceClaims.

``gpuguard serve --dra-claims`` starts one per process (``start_shared_watch``) and registers
it as the claim source of every engine the process builds (``gpuguard.workloads.claims.set_shared``), so
a config reload keeps it.  Reviews only read its dict; the apiserver is called from the watch
threads, never inside a review.  RBAC: ``list`` and ``watch`` on both kinds
(``deploy/base/rbac.yaml``).

Both kinds are followed by the shared list+watch (``gpuguard.kubeapi.watch.ResourceWatch``): pages of raw JSON,
each object reduced to its device requests as it arrives, so a tenant's thousands of claim templates cost what
gpuguard keeps of them (a few requests each), never a whole list decoded at once (the list it replaced: 632 MiB
beside 250 large templates).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from gpuguard.kubeapi.client import apis
from gpuguard.kubeapi.watch import SERVER_PAGE_SIZE, ResourceWatch
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
# How often a cluster that serves no claim API is asked again (quietly) whether it does now.
REDISCOVER_SECONDS = 300.0


class ClaimWatch:
    """A cached list+watch of ResourceClaimTemplates and ResourceClaims, for the webhook.

    One shared list+watch per kind (paginated, bookmarks, lists again only after a 410, capped back-off).
    Lookups read a dict (no lock needed: each update replaces one key, which is atomic in CPython).  Only
    the device requests are kept, not whole objects.
    """

    def __init__(self, api_client: Any, version: str | None = None):
        self._api_client = api_client
        self._version = version
        self._store: dict[tuple[str, str | None, str], list[DeviceRequest]] = {}
        self._synced: dict[str, bool] = {kind: False for kind in PLURALS}
        self._watches: list[ResourceWatch] = []
        self._discovery_error: str | None = None
        self.not_served = False  # the cluster serves no version of the claim API (nothing to wait for)
        self._stopped = threading.Event()

    @property
    def error(self) -> str | None:
        """Why a claim list or watch is failing now (``None`` while they work)."""
        return self._discovery_error or next((w.error for w in self._watches if w.error), None)

    # ------------------------------------------------------------------ ClaimSource
    def lookup(self, kind: ClaimKind, namespace: str | None, name: str) -> list[DeviceRequest] | None:
        return self._store.get((kind, namespace, name))

    def why_unknown(self) -> str:
        if self.not_served:
            return f"the cluster does not serve {GROUP} (DRA)"
        if self.error:
            return f"the claim watch is failing ({self.error})"
        if not all(self._synced.values()):
            return "the claim watch has not synced yet"
        return "no such object in the namespace"

    @property
    def synced(self) -> bool:
        return self.not_served or all(self._synced.values())

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ClaimWatch:
        version = self._version or self._served_version()
        if version is None:
            # A cluster without DRA (1.33 with the API off, or older): nothing to watch and nothing to wait for.
            # Said once; discovery is asked again quietly until the API appears (a cluster upgrade).
            log.info("the cluster does not serve %s: pods that name DRA claims are judged not fully checked; "
                     "asking again every %.0f s", GROUP, REDISCOVER_SECONDS)
            self.not_served = True
            threading.Thread(target=self._wait_for_api, daemon=True, name="gpuguard-claims-discovery").start()
            return self
        for watch in self.make_watches(version):
            watch.start()
        return self

    def _wait_for_api(self) -> None:
        while not self._stopped.wait(REDISCOVER_SECONDS):
            version = self._served_version(quiet=True)
            if version is not None:
                log.info("the cluster now serves %s/%s: watching DRA claims", GROUP, version)
                self.not_served, self._discovery_error = False, None
                for watch in self.make_watches(version):
                    watch.start()
                return

    def make_watches(self, version: str) -> list[ResourceWatch]:
        """The list+watch of each kind in ``version``, not started (``start`` runs them in their threads)."""
        self._watches = [ResourceWatch(self._api_client, f"/apis/{GROUP}/{version}/{plural}",
                                       lambda event, obj, kind=kind: self._event(kind, event, obj),
                                       lambda seen, kind=kind: self._listed(kind, seen), name=plural,
                                       page_size=SERVER_PAGE_SIZE)
                         for kind, plural in PLURALS.items()]
        return self._watches

    def stop(self) -> None:
        self._stopped.set()
        for watch in self._watches:
            watch.stop()

    def _event(self, kind: ClaimKind, event: str, obj: dict) -> None:
        obj["kind"] = kind
        if event == "DELETED":
            self._store.pop(self._key(kind, obj), None)
        else:
            self._store[self._key(kind, obj)] = device_requests(claim_spec_of(obj))

    def _listed(self, kind: ClaimKind, seen: set[tuple[str, str]]) -> None:
        """A complete list of ``kind``: claims deleted while nobody watched go."""
        for key in [k for k in self._store if k[0] == kind and ((k[1] or ""), k[2]) not in seen]:
            self._store.pop(key, None)
        self._synced[kind] = True

    def _served_version(self, quiet: bool = False) -> str | None:
        """The newest version of the claim API the cluster serves; ``None`` when it serves none (a failed discovery
        falls back to the newest gpuguard knows, and the watch says what fails)."""
        try:
            groups = apis(self._api_client).get_api_versions().groups or []
        except Exception as exc:  # noqa: BLE001 - any API failure: fall back and let the watch report it
            if quiet:
                return None
            self._discovery_error = f"API discovery failed: {type(exc).__name__}"
            return VERSIONS[-1]
        for group in groups:
            if group.name == GROUP:
                served = {v.version for v in group.versions or []}
                for version in VERSIONS:
                    if version in served:
                        return version
        self._discovery_error = f"the apiserver does not serve {GROUP}"
        return None

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
