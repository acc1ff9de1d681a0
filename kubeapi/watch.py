"""A list-then-watch of one resource collection, as client-go's reflector does it, in a daemon thread.

The one way gpuguard follows a collection -- the scan's workloads, runtimes, namespaces and reports, the
server's nodes and DRA claims -- so each costs what its consumer keeps, never what the cluster holds: pages of
raw JSON, each object handed on and dropped, never the client's model objects of a whole list.

- **List** in pages (``limit`` + ``continue``), so no response holds a whole large collection; an
  expired continue token (410 on a later page) starts the list again from its first page, without the
  token, counting the keys seen afresh: objects of the first try are handed on again (the handler keeps
  one of each) and ``on_sync`` only ever gets the keys of one complete list, so objects deleted while
  nobody watched are dropped and none that exists is.
- **Watch** from the list's ``resourceVersion`` with ``allowWatchBookmarks``: the apiserver sends
  bookmarks carrying a newer resourceVersion, so a watch that ends (``timeoutSeconds``, a dropped
  connection) resumes from where it was instead of listing again.  Only a 410 Gone (the version has
  been compacted away) lists again.
- Errors back off (1 s doubling to 60 s); the handlers' exceptions are logged, never fatal.

Objects are handed on as parsed JSON dicts; nothing is kept here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from gpuguard.kubeapi.client import ApiError, request

log = logging.getLogger("gpuguard.watch")
Key = tuple[str, str]  # (namespace or "", name)
PAGE_SIZE = 500
# The webhook server's pages: smaller, because a page is decoded whole before its objects are slimmed, and the
# server's memory is what admission runs in (bench/watches.py, 5,000 nodes and 10,000 claim templates: RSS 147 MiB
# with pages of 500, 124 with 100, 119 with 50; 100 keeps the requests per list to a fifth of 50's).
SERVER_PAGE_SIZE = 100
WATCH_SECONDS = 300


class Gone(Exception):
    """The resourceVersion watched from is too old (410): list again."""


def key_of(obj: dict) -> Key:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if line.strip():
                yield line
    if pending.strip():
        yield pending


class ResourceWatch:
    """List+watch of the collection at ``path`` (``/api/v1/pods``, ``/apis/batch/v1/jobs`` ...)."""

    def __init__(self, api: Any, path: str, on_event: Callable[[str, dict], None],
                 on_sync: Callable[[set[Key]], None], *, page_size: int = PAGE_SIZE,
                 label_selector: str | None = None, name: str = "") -> None:
        self.api, self.path = api, path
        self.on_event, self.on_sync = on_event, on_sync
        self.page_size = page_size
        self.label_selector = label_selector
        self.name = name or path
        self.synced = False
        self.lists = 0
        self.error: str | None = None
        self._stop = threading.Event()

    def start(self) -> ResourceWatch:
        threading.Thread(target=self.run, daemon=True, name=f"gpuguard-watch-{self.name}").start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                version = self.list()
                delay = 1.0
                while not self._stop.is_set():
                    version = self.watch(version)
            except Gone:
                log.info("%s: resourceVersion expired, listing again", self.name)
            except ApiError as exc:
                if exc.status in (401, 403, 404) and not self.synced:
                    # forbidden (RBAC lacks a rule) or gone: this collection shows nothing, which must not
                    # hold the scan of everything else back; it is listed again after the back-off
                    self.synced = True
                self.error = f"{self.name}: HTTP {exc.status}"
                log.warning("listing %s failed (HTTP %s); retrying in %.0f s", self.name, exc.status, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)
            except Exception as exc:  # noqa: BLE001 - keep watching; the cache stays as it was
                self.error = f"{self.name}: {type(exc).__name__}: {exc}"[:300]
                log.warning("watching %s failed (%s); retrying in %.0f s", self.name, self.error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 60.0)

    def _call(self, query: dict[str, Any], timeout: Any, stream: bool = False) -> Any:
        if self.label_selector:
            query = {**query, "labelSelector": self.label_selector}
        return request(self.api, "GET", self.path, query, timeout=timeout, stream=stream)

    def list(self) -> str:
        """Every object, page by page, to ``on_event("ADDED")``; then ``on_sync``; the list's resourceVersion."""
        for _attempt in range(3):
            seen: set[Key] = set()
            token: str | None = None
            try:
                while True:
                    response = self._call({"limit": self.page_size, "continue": token}, timeout=(10, 120))
                    page = orjson.loads(response.data)
                    for item in page.get("items") or []:
                        seen.add(key_of(item))
                        self._emit("ADDED", item)
                    meta = page.get("metadata") or {}
                    token = meta.get("continue")
                    if not token:
                        self.lists += 1
                        self.synced, self.error = True, None
                        self._sync(seen)
                        return str(meta.get("resourceVersion") or "")
            except ApiError as exc:
                if exc.status != 410 or not token:
                    raise
        raise Gone()

    def watch(self, version: str) -> str:
        """Events from ``version`` until the server ends the watch; the newest resourceVersion seen."""
        query = {"watch": True, "resourceVersion": version, "allowWatchBookmarks": True,
                 "timeoutSeconds": WATCH_SECONDS}
        response = self._call(query, timeout=(10, WATCH_SECONDS + 60), stream=True)
        try:
            for line in _lines(response):
                if self._stop.is_set():
                    break
                event = orjson.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    self._emit(kind, obj)
        finally:
            response.release_conn()
        return version

    def _emit(self, kind: str, obj: dict) -> None:
        try:
            self.on_event(kind, obj)
        except Exception:  # a handler's bug costs one event, never the watch
            log.exception("%s: handling a %s event failed", self.name, kind)

    def _sync(self, seen: set[Key]) -> None:
        try:
            self.on_sync(seen)
        except Exception:
            log.exception("%s: handling a re-list failed", self.name)
