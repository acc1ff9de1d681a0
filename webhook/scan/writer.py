"""Writes the scan's reports: create, replace or delete only when content changed, rate-limited.

The writer remembers, per report, the digest of its content (also kept in the report's
``gpuguard.io/content-digest`` annotation) and its resourceVersion.  A report whose digest equals the
stored one is not written at all, so a resync of an unchanged cluster costs no write and no watch
event for Policy Reporter.  ``load`` reads what the previous leader left (one paginated list), so a
new leader does not rewrite every report either.

A report is trusted for what it *says*, never for its annotation: ``load`` digests each report's content, and
``observe`` (fed by a watch on gpuguard's reports) notices a report someone else edited or deleted, so the
next ``put`` of it writes it back.  Whoever can edit a PolicyReport can't make gpuguard's verdict say
something else for longer than the scan takes to see the event.

Writes pass a token bucket (``qps``, ``burst``): a config change that alters every report of a big
cluster is spread out rather than thrown at the apiserver at once.

A write that fails for a passing reason (a 5xx, a 429, a conflict still there after one re-read, a
timeout or dropped connection) is tried again soon, per report: 1 s doubling to at most 60 s, each
wait drawn between half and the whole of that (jitter, so reports that failed together do not come
back together), through the same token bucket.  A refusal that trying again cannot change (a 422, a
403, a namespace gone) is logged once and left to the resync.  Only the newest wanted state of a
report is ever retried: a new write or delete of the same report replaces the pending one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3

from gpuguard.kubeapi.client import ApiError, request
from gpuguard.webhook.reportapi import POLICY_REPORTS, ReportApi
from gpuguard.webhook.scan.report import GROUP_LABEL, KIND_LABEL, LABEL_SELECTOR, Built, digest_of

log = logging.getLogger("gpuguard.scan.writer")
ReportKey = tuple[str, str]  # (namespace or "", name)
RETRY_FIRST = 1.0  # seconds before the first retry of a failed write
RETRY_MAX = 60.0  # the longest wait between two retries of one report
# what a request raises when no answer came: a timeout, a refused or dropped connection
TRANSIENT_ERRORS = (urllib3.exceptions.HTTPError, OSError)


def retryable(status: int) -> bool:
    """Whether a write refused with ``status`` may succeed when simply tried again later."""
    return status in (408, 409, 429) or status >= 500


@dataclass
class Retry:
    """A report write to try again: how many times it failed in a row, when, and what (None: delete)."""

    failures: int
    due: float  # time.monotonic()
    built: Built | None


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

    def __init__(self, api: Any, qps: float = 20.0, burst: int = 50, *, timeout: float = 30.0,
                 retry_first: float = RETRY_FIRST, retry_max: float = RETRY_MAX,
                 report_api: ReportApi = POLICY_REPORTS) -> None:
        self.api = api
        self.report_api = report_api
        self.bucket = TokenBucket(qps, burst)
        self.timeout = timeout
        self.retry_first, self.retry_max = retry_first, retry_max
        self.known: dict[ReportKey, tuple[str, str]] = {}  # -> (digest, resourceVersion)
        self.kinds: dict[ReportKey, tuple[str, str]] = {}  # -> the subject's (group, kind)
        self.writes = {"create": 0, "update": 0, "delete": 0, "unchanged": 0}
        self.errors = 0
        self.retries = 0  # retries made (each also counted in ``writes`` when it succeeds)
        self.pending: dict[ReportKey, Retry] = {}
        self._refused: dict[ReportKey, int] = {}  # the status last logged per refused report: logged once

    def _path(self, namespace: str, name: str | None = None) -> str:
        return self.report_api.path(namespace or None, name)

    def load(self) -> None:
        """What reports exist now (this process's or a previous leader's), with their digests."""
        known: dict[ReportKey, tuple[str, str]] = {}
        kinds: dict[ReportKey, tuple[str, str]] = {}
        for path in self.report_api.everywhere():
            token = None
            while True:
                query = {"labelSelector": LABEL_SELECTOR, "limit": 500, "continue": token}
                page = orjson.loads(request(self.api, "GET", path, query, timeout=60).data)
                for item in page.get("items") or []:
                    meta = item.get("metadata") or {}
                    key = (meta.get("namespace") or "", meta.get("name") or "")
                    # what it says, not what its annotation claims: an edited report is rewritten
                    known[key] = (digest_of(item), str(meta.get("resourceVersion") or ""))
                    labels = meta.get("labels") or {}
                    kinds[key] = _kind_of(labels)
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
        self.known, self.kinds = known, kinds
        self.pending.clear()  # a full pass follows a load: it writes whatever is still wanted

    def put(self, built: Built) -> str:
        """Create or replace one report unless it already says the same; what was done (``create``,
        ``update``, ``unchanged``; ``retry``: failed, tried again soon; ``refused``: left to the resync;
        ``gone``: its namespace is going away)."""
        meta = built.report["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        before = self.pending.pop(key, None)
        have = self.known.get(key)
        if have is not None and have[0] == built.digest:
            self.writes["unchanged"] += 1
            return "unchanged"
        self.bucket.take()
        try:
            done = self._create(key, built) if have is None else self._replace(key, built, have[1])
        except ApiError as exc:
            return self._failed(key, built, before, exc.status, str(exc.body)[:200])
        except TRANSIENT_ERRORS as exc:
            return self._failed(key, built, before, 0, type(exc).__name__)
        self._refused.pop(key, None)
        return done

    def observe(self, kind: str, key: ReportKey, version: str, digest: str) -> bool:
        """A report as the cluster holds it now (``kind``: the watch event; ``digest``: ``digest_of`` its content):
        whether it no longer says what this writer wrote -- edited or deleted by someone else -- in which case
        the next ``put`` of it writes it back.  Its own writes (their resourceVersion) and reports it never
        wrote change nothing."""
        have = self.known.get(key)
        if have is None or version == have[1]:
            return False
        if kind == "DELETED":
            self.known.pop(key, None)
            self.kinds.pop(key, None)
            return True
        self.known[key] = (digest, version)
        return digest != have[0]

    def delete(self, key: ReportKey) -> None:
        """Delete one report (its workload is gone); a report already gone is fine."""
        before = self.pending.pop(key, None)
        if key not in self.known:
            return
        self.bucket.take()
        try:
            request(self.api, "DELETE", self._path(*key), timeout=self.timeout).release_conn()
            self.writes["delete"] += 1
        except ApiError as exc:
            if exc.status != 404:
                self._failed(key, None, before, exc.status, str(exc.body)[:200])
                return
        except TRANSIENT_ERRORS as exc:
            self._failed(key, None, before, 0, type(exc).__name__)
            return
        self.known.pop(key, None)
        self.kinds.pop(key, None)
        self._refused.pop(key, None)

    def retry_due(self, now: float | None = None) -> int:
        """Try again the failed writes whose wait is over; how many were tried."""
        now = time.monotonic() if now is None else now
        due = [(key, retry) for key, retry in self.pending.items() if retry.due <= now]
        for key, retry in due:
            if self.pending.get(key) is not retry:
                continue  # replaced meanwhile by a newer write of the same report
            self.retries += 1
            if retry.built is None:
                self.delete(key)
            else:
                self.put(retry.built)
        return len(due)

    def _failed(self, key: ReportKey, built: Built | None, before: Retry | None, status: int, detail: str) -> str:
        """Schedule the write again after a passing failure (``status`` 0: no answer), or leave it to the
        resync; what was decided."""
        self.errors += 1
        verb = "writing" if built is not None else "deleting"
        if status and not retryable(status):
            if status == 404 or (status == 403 and "being terminated" in detail):
                return "gone"  # the namespace (and so the workload) is going away
            if self._refused.get(key) != status:
                self._refused[key] = status
                log.warning("%s report %s/%s refused: HTTP %s %s; left to the resync", verb, key[0], key[1],
                            status, detail)
            return "refused"
        failures = (before.failures if before is not None else 0) + 1
        wait = min(self.retry_max, self.retry_first * 2 ** (failures - 1)) * random.uniform(0.5, 1.0)
        self.pending[key] = Retry(failures, time.monotonic() + wait, built)
        log.log(logging.WARNING if failures == 1 else logging.INFO,
                "%s report %s/%s failed (%s, %d in a row); retrying in %.1f s", verb, key[0], key[1],
                f"HTTP {status} {detail}" if status else detail, failures, wait)
        return "retry"

    def _create(self, key: ReportKey, built: Built) -> str:
        try:
            created = orjson.loads(request(self.api, "POST", self._path(key[0]), body=built.report,
                                           timeout=self.timeout).data)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = orjson.loads(request(self.api, "GET", self._path(*key), timeout=self.timeout).data)
            version = str((current.get("metadata") or {}).get("resourceVersion", ""))
            if digest_of(current) == built.digest:  # someone (a previous leader) wrote it already, alike
                self.known[key] = (built.digest, version)
                self.kinds[key] = _kind_of(built.report["metadata"].get("labels") or {})
                self.writes["unchanged"] += 1
                return "unchanged"
            return self._replace(key, built, version)
        self.known[key] = (built.digest, created["metadata"]["resourceVersion"])
        self.kinds[key] = _kind_of(built.report["metadata"].get("labels") or {})
        self.writes["create"] += 1
        return "create"

    def _replace(self, key: ReportKey, built: Built, version: str) -> str:
        body = {**built.report, "metadata": {**built.report["metadata"], "resourceVersion": version}}
        try:
            stored = orjson.loads(request(self.api, "PUT", self._path(*key), body=body, timeout=self.timeout).data)
        except ApiError as exc:
            if exc.status == 404:  # deleted behind our back (by hand, or by the garbage collector)
                self.known.pop(key, None)
                return self._create(key, built)
            if exc.status != 409:
                raise
            current = orjson.loads(request(self.api, "GET", self._path(*key), timeout=self.timeout).data)
            body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion", "")
            stored = orjson.loads(request(self.api, "PUT", self._path(*key), body=body, timeout=self.timeout).data)
        self.known[key] = (built.digest, stored["metadata"]["resourceVersion"])
        self.kinds[key] = _kind_of(built.report["metadata"].get("labels") or {})
        self.writes["update"] += 1
        return "update"

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
