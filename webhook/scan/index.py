"""What the scan knows of the cluster: the workloads users write, namespace labels and runtimes.

**Tracked workloads** are the objects users write: an object whose controlling owner is itself of a
kind gpuguard lists (a Deployment's ReplicaSet and pods, a Job's pods, a JobSet's Jobs) is not
tracked, its owner is reported.  Each is kept as the compact JSON of the object cleaned of what the
server set (``audit --cluster``'s ``strip_server_fields``) up to ``MAX_KEPT_BYTES``, beyond that as its
digest alone (read again when it must be judged), so memory per workload is bounded and a status-only
update (a controller counting pods) changes nothing and costs no re-evaluation.

Every change that can change a decision marks keys dirty: the workload itself, its namespace's
labels (they pick the config profile), a runtime it may read.  The scanner takes the dirty set.
Access is under one lock: the watch threads write, the scanner thread reads.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field

import orjson

from gpuguard.kubeapi.watch import Key
from gpuguard.webhook.cli.audit.cluster import controller_of, strip_server_fields
from gpuguard.webhook.cli.audit.cost import is_finished
from gpuguard.webhook.scan.discovery import Collection
from gpuguard.webhook.scan.report import Subject
from gpuguard.workloads.kinds import lookup

WorkloadKey = tuple[str, str, str, str]  # (group, kind, namespace or "", name)
RuntimeKey = tuple[str, str, str | None, str]


# The cleaned JSON of a tracked workload is kept up to this size; a larger one is kept as its digest only and
# read again from the apiserver when it must be judged (``Entry.body`` None).  What the scan keeps per workload
# is bounded, whatever users write into their objects: 700 Deployments of 1 MiB would otherwise hold 700 MiB.
MAX_KEPT_BYTES = 64 * 1024


@dataclass(frozen=True)
class Entry:
    """One tracked workload: its subject, the cleaned object as JSON (``None`` past ``MAX_KEPT_BYTES``), the
    digest that says whether a decision could change, whether it has finished, and where to read it again."""

    subject: Subject
    body: bytes | None = field(compare=False)
    finished: bool
    digest: bytes = b""
    path: str = field(default="", compare=False)

    def obj(self) -> dict | None:
        """The cleaned object, or ``None`` where only its digest is kept (``Scanner`` reads it again)."""
        if self.body is None:
            return None
        loaded: dict = orjson.loads(self.body)
        return loaded

    @classmethod
    def of(cls, subject: Subject, cleaned: dict, finished: bool, path: str) -> Entry:
        body = orjson.dumps(cleaned)
        digest = hashlib.blake2b(body, digest_size=16).digest()
        return cls(subject, body if len(body) <= MAX_KEPT_BYTES else None, finished, digest, path)


class Index:
    """Tracked workloads, namespace labels and runtimes, and the keys that need a new decision."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.entries: dict[WorkloadKey, Entry] = {}
        self.removed: dict[WorkloadKey, Subject] = {}  # deleted since the scanner last looked
        self.dirty: set[WorkloadKey] = set()
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.runtimes: dict[RuntimeKey, dict] = {}
        self.listed: set[tuple[str, str]] = set()  # (group, kind) of every workload collection watched
        self.changed = threading.Event()
        self.skipped_owned = 0
        self.dirty_since: float | None = None  # monotonic time of the oldest change not taken yet

    # ------------------------------------------------------------------ workloads
    def workload_event(self, collection: Collection, kind: str, raw: dict) -> None:
        meta = raw.get("metadata") or {}
        key: WorkloadKey = (collection.group, collection.kind, meta.get("namespace") or "", meta.get("name") or "")
        if kind == "DELETED":
            self._remove(key)
            return
        owner = controller_of(raw)
        if owner is not None:
            spec = lookup(owner.get("apiVersion"), owner.get("kind"))
            if spec is not None and spec.api_group_kind in self.listed:
                self.skipped_owned += 1
                return
        raw.setdefault("apiVersion", collection.api_version)
        raw.setdefault("kind", collection.kind)
        subject = Subject(collection.api_version, collection.kind, meta.get("namespace") or None,
                          meta.get("name") or "", str(meta.get("uid") or ""))
        entry = Entry.of(subject, strip_server_fields(raw), is_finished(raw),
                         collection.object_path(meta.get("namespace") or None, meta.get("name") or ""))
        with self._lock:
            if self.entries.get(key) == entry:
                return  # a status-only update: nothing a decision reads has changed
            old = self.entries.get(key)
            if old is not None and old.subject.uid != subject.uid:
                self.removed[key] = old.subject  # deleted and re-created between two events
            self.entries[key] = entry
            self.dirty.add(key)
        self._changed()

    def workload_sync(self, collection: Collection, seen: set[Key]) -> None:
        """After a (re-)list: drop what the list no longer has."""
        with self._lock:
            gone = [k for k in self.entries if k[:2] == (collection.group, collection.kind) and k[2:] not in seen]
        for key in gone:
            self._remove(key)

    def _remove(self, key: WorkloadKey) -> None:
        with self._lock:
            entry = self.entries.pop(key, None)
            if entry is None:
                return
            self.removed[key] = entry.subject
            self.dirty.discard(key)
        self._changed()

    # ------------------------------------------------------------------ what decisions read
    def namespace_event(self, kind: str, raw: dict) -> None:
        meta = raw.get("metadata") or {}
        name = meta.get("name") or ""
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        with self._lock:
            before = self.namespace_labels.get(name)
            if kind == "DELETED":
                self.namespace_labels.pop(name, None)
                return
            self.namespace_labels[name] = labels
            if before is None or before == labels:
                return
            self.dirty.update(k for k in self.entries if k[2] == name)
        self._changed()

    def runtime_event(self, collection: Collection, kind: str, raw: dict) -> None:
        meta = raw.get("metadata") or {}
        key: RuntimeKey = (collection.group, collection.kind, meta.get("namespace") or None, meta.get("name") or "")
        raw.setdefault("apiVersion", collection.api_version)
        raw.setdefault("kind", collection.kind)
        with self._lock:
            if kind == "DELETED":
                self.runtimes.pop(key, None)
            elif self.runtimes.get(key) == raw:
                return
            else:
                self.runtimes[key] = raw
            self._mark_runtime_readers(key[2])
        self._changed()

    def _mark_runtime_readers(self, namespace: str | None) -> None:
        """Workloads that may read a runtime in ``namespace`` (every namespace for a cluster-scoped one)."""
        for key, entry in self.entries.items():
            spec = lookup(entry.subject.api_version, entry.subject.kind)
            if spec is not None and (spec.runtime is not None or spec.merged_runtime is not None) and (
                    namespace is None or key[2] == namespace):
                self.dirty.add(key)

    def _changed(self) -> None:
        if self.dirty_since is None:
            self.dirty_since = time.monotonic()
        self.changed.set()

    def mark(self, key: WorkloadKey) -> None:
        with self._lock:
            self.dirty.add(key)

    def mark_all(self) -> None:
        """Everything needs a new decision (config or inventory changed, a resync)."""
        with self._lock:
            self.dirty.update(self.entries)
        self._changed()

    def take(self) -> tuple[list[tuple[WorkloadKey, Entry]], dict[WorkloadKey, Subject], float | None]:
        """The dirty workloads (with their entries), the removed ones and when the oldest of those changes
        happened, emptying both sets."""
        with self._lock:
            batch = [(k, self.entries[k]) for k in self.dirty if k in self.entries]
            removed, self.removed = self.removed, {}
            self.dirty = set()
            since, self.dirty_since = self.dirty_since, None
            self.changed.clear()
        return batch, removed, since

    def pending(self) -> int:
        return len(self.dirty) + len(self.removed)


class CachedRuntimes:
    """``RequestContext.read_object`` and ``list_objects`` over the watched runtimes (no request per review)."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def __call__(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        runtimes = self._index.runtimes
        return runtimes.get((group, kind, namespace, name)) or runtimes.get((group, kind, None, name))

    def list_objects(self, group: str, kind: str, namespace: str | None) -> list[dict]:
        return [obj for (g, k, ns, _), obj in list(self._index.runtimes.items())
                if g == group and k == kind and ns == namespace]

    def __bool__(self) -> bool:
        return True
