"""Writes the scan's reports: create, replace or delete only when content changed, rate-limited.

The writer remembers, per report, the digest of its content (also kept in the report's
``gpuguard.io/content-digest`` annotation) and its resourceVersion.  A report whose digest equals the
stored one is not written at all, so a resync of an unchanged cluster costs no write and no watch
event for Policy Reporter.  ``load`` reads what the previous leader left (one paginated list), so a
new leader does not rewrite every report either.

Writes pass a token bucket (``qps``, ``burst``): a config change that alters every report of a big
cluster is spread out rather than thrown at the apiserver at once.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson

from gpuguard.kubeapi.client import ApiError, request
from gpuguard.webhook.scan.report import API_VERSION, DIGEST_ANNOTATION, GROUP_LABEL, KIND_LABEL, LABEL_SELECTOR, Built

log = logging.getLogger("gpuguard.scan.writer")
ReportKey = tuple[str, str]  # (namespace or "", name)
GROUP_PATH = "/apis/" + API_VERSION


def _path(namespace: str, name: str | None = None) -> str:
    base = f"{GROUP_PATH}/namespaces/{namespace}/policyreports" if namespace else f"{GROUP_PATH}/clusterpolicyreports"
    return f"{base}/{name}" if name else base


class TokenBucket:
    """At most ``qps`` operations a second on average, ``burst`` at once."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, float(burst)
        self.tokens = float(burst)
        self.at = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.qps)
            self.at = now
            wait = 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.qps
            self.tokens -= 1
        if wait > 0:
            time.sleep(wait)


class Writer:
    """The reports in the cluster, as far as this process knows them, and the writes that keep them so."""

    def __init__(self, api: Any, qps: float = 20.0, burst: int = 50) -> None:
        self.api = api
        self.bucket = TokenBucket(qps, burst)
        self.known: dict[ReportKey, tuple[str, str]] = {}  # -> (digest, resourceVersion)
        self.kinds: dict[ReportKey, tuple[str, str]] = {}  # -> the subject's (group, kind)
        self.writes = {"create": 0, "update": 0, "delete": 0, "unchanged": 0}
        self.errors = 0

    def load(self) -> None:
        """What reports exist now (this process's or a previous leader's), with their digests."""
        known: dict[ReportKey, tuple[str, str]] = {}
        kinds: dict[ReportKey, tuple[str, str]] = {}
        for path in (f"{GROUP_PATH}/policyreports", f"{GROUP_PATH}/clusterpolicyreports"):
            token = None
            while True:
                query = {"labelSelector": LABEL_SELECTOR, "limit": 500, "continue": token}
                page = orjson.loads(request(self.api, "GET", path, query, timeout=60).data)
                for item in page.get("items") or []:
                    meta = item.get("metadata") or {}
                    digest = (meta.get("annotations") or {}).get(DIGEST_ANNOTATION, "")
                    key = (meta.get("namespace") or "", meta.get("name") or "")
                    known[key] = (str(digest), str(meta.get("resourceVersion") or ""))
                    labels = meta.get("labels") or {}
                    kinds[key] = _kind_of(labels)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
        self.known, self.kinds = known, kinds

    def put(self, built: Built) -> str:
        """Create or replace one report unless it already says the same; what was done."""
        meta = built.report["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        have = self.known.get(key)
        if have is not None and have[0] == built.digest:
            self.writes["unchanged"] += 1
            return "unchanged"
        self.bucket.take()
        try:
            if have is None:
                return self._create(key, built)
            return self._replace(key, built, have[1])
        except ApiError as exc:
            self.errors += 1
            if exc.status == 404 or (exc.status == 403 and "being terminated" in str(exc.body)):
                return "gone"  # the namespace (and so the workload) is going away
            log.warning("writing report %s/%s failed: HTTP %s %s", key[0], key[1], exc.status, str(exc.body)[:200])
            return "error"

    def _create(self, key: ReportKey, built: Built) -> str:
        try:
            created = orjson.loads(request(self.api, "POST", _path(key[0]), body=built.report, timeout=30).data)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = orjson.loads(request(self.api, "GET", _path(*key), timeout=30).data)
            return self._replace(key, built, (current.get("metadata") or {}).get("resourceVersion", ""))
        self.known[key] = (built.digest, created["metadata"]["resourceVersion"])
        self.kinds[key] = _kind_of(built.report["metadata"].get("labels") or {})
        self.writes["create"] += 1
        return "create"

    def _replace(self, key: ReportKey, built: Built, version: str) -> str:
        body = {**built.report, "metadata": {**built.report["metadata"], "resourceVersion": version}}
        try:
            stored = orjson.loads(request(self.api, "PUT", _path(*key), body=body, timeout=30).data)
        except ApiError as exc:
            if exc.status == 404:  # deleted behind our back (by hand, or by the garbage collector)
                self.known.pop(key, None)
                return self._create(key, built)
            if exc.status != 409:
                raise
            current = orjson.loads(request(self.api, "GET", _path(*key), timeout=30).data)
            body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion", "")
            stored = orjson.loads(request(self.api, "PUT", _path(*key), body=body, timeout=30).data)
        self.known[key] = (built.digest, stored["metadata"]["resourceVersion"])
        self.kinds[key] = _kind_of(built.report["metadata"].get("labels") or {})
        self.writes["update"] += 1
        return "update"

    def delete(self, key: ReportKey) -> None:
        """Delete one report (its workload is gone); a report already gone is fine."""
        if key not in self.known:
            return
        self.bucket.take()
        try:
            request(self.api, "DELETE", _path(*key), timeout=30).release_conn()
            self.writes["delete"] += 1
        except ApiError as exc:
            if exc.status != 404:
                self.errors += 1
                log.warning("deleting report %s/%s failed: HTTP %s", key[0], key[1], exc.status)
                return
        self.known.pop(key, None)
        self.kinds.pop(key, None)

    def sweep(self, wanted: set[ReportKey], unlisted: frozenset[tuple[str, str]] = frozenset()) -> int:
        """Delete every report of ours not in ``wanted`` (workloads deleted while nobody was leading,
        or no longer worth a report), but those about a kind in ``unlisted`` (group, kind: its list fails
        now, so its workloads are unknown, not gone); how many."""
        stale = [key for key in self.known if key not in wanted and self.kinds.get(key) not in unlisted]
        for key in stale:
            self.delete(key)
        return len(stale)


def _kind_of(labels: dict[str, str]) -> tuple[str, str]:
    group = labels.get(GROUP_LABEL, "")
    return ("" if group == "core" else group), labels.get(KIND_LABEL, "")
