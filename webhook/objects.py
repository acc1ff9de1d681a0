"""Reading the objects a workload names or its operator selects (a TrainJob's runtime, an InferenceService's
ServingRuntime), for ``RequestContext.read_object`` and ``RequestContext.list_objects``.

Two sources, one shape — ``(group, kind, namespace or None, name) -> object or None`` to read, and a
``list_objects(group, kind, namespace or None) -> objects or None`` method to list:

* ``StaticLookup``: the audit's own input (a runtime and its TrainJobs in the same manifests);
* ``ApiLookup``: the API server, through ``kubeapi``, each answer cached for ``TTL`` seconds
  (misses too, for less), for ``audit --cluster`` and the webhook server.  The server never
  blocks its event loop on it: ``prefetch`` makes the reads and lists in a thread before the engine,
  which then only reads the cache (``cached``, ``cached_list``).  It needs ``get`` on the runtime kinds
  and ``list`` on those selected by content (``deploy/base/rbac.yaml``).

Which kinds can be read, and where, comes from the kind table (``KindSpec.runtime.resources``,
``KindSpec.merged_runtime.resources``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from gpuguard.workloads.kinds import KINDS, lookup, runtime_of
from gpuguard.workloads.volumes import shared_claims

log = logging.getLogger("gpuguard.lookup")
Key = tuple[str, str, str | None, str]

# (group, kind) -> (version, plural) for every kind a workload may name.
READABLE: dict[tuple[str, str], tuple[str, str]] = {
    **{(spec.runtime.group, kind): (version, plural)
       for spec in KINDS if spec.runtime is not None for kind, version, plural in spec.runtime.resources},
    **{(spec.merged_runtime.group, kind): (version, plural)
       for spec in KINDS if spec.merged_runtime is not None for kind, version, plural in spec.merged_runtime.resources},
}
# Core objects a policy reads one by one, never listed or watched: (group, kind) -> (version, plural).  A
# PersistentVolumeClaim's access modes (shared-rwo-claim); the webhook needs ``get`` on them.
READABLE_CORE: dict[tuple[str, str], tuple[str, str]] = {
    ("", "PersistentVolumeClaim"): ("v1", "persistentvolumeclaims")}
# Core objects a policy lists per namespace: (group, kind) -> (version, plural).  The namespace's ResourceQuotas
# (namespace-quota); the webhook needs ``list`` on them.
LISTABLE_CORE: dict[tuple[str, str], tuple[str, str]] = {("", "ResourceQuota"): ("v1", "resourcequotas")}
# Lists are cached per (group, kind, namespace or None).
ListKey = tuple[str, str, str | None]


def _key_of(obj: dict) -> Key | None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(meta.get("name"), str):
        return None
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    if (group, kind) not in READABLE and (group, kind) not in READABLE_CORE and (group, kind) not in LISTABLE_CORE:
        return None
    namespace = meta.get("namespace") if isinstance(meta.get("namespace"), str) else None
    return group, kind, namespace, meta["name"]


class StaticLookup:
    """The readable objects among a set of manifests (namespaced ones without a namespace match any)."""

    def __init__(self, objects: Iterable[Any]) -> None:
        self._objects: dict[Key, dict] = {}
        for obj in objects:
            key = _key_of(obj) if isinstance(obj, dict) else None
            if key is not None:
                self._objects[key] = obj

    def __call__(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        return self._objects.get((group, kind, namespace, name)) or self._objects.get((group, kind, None, name))

    def list_objects(self, group: str, kind: str, namespace: str | None) -> list[dict]:
        """The objects of a kind in ``namespace`` (those without a namespace too), or cluster-scoped ones."""
        return [obj for (g, k, ns, _), obj in self._objects.items()
                if g == group and k == kind and (ns is None or ns == namespace)]

    def __bool__(self) -> bool:
        return bool(self._objects)


class FirstFound:
    """Several lookups in order: the first that has an object answers; lists are the union.

    ``gpuguard audit FILES --lookup-cluster``: runtimes in the audited files win, the cluster's fill in
    what the files lack (Kubeflow Trainer and KServe ship theirs as cluster objects).
    """

    def __init__(self, *lookups: Any) -> None:
        self._lookups = lookups

    def __call__(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        for source in self._lookups:
            found = source(group, kind, namespace, name)
            if found is not None:
                return found
        return None

    def list_objects(self, group: str, kind: str, namespace: str | None) -> list[dict] | None:
        """Every lookup's objects of a kind (``None`` only when no lookup could list them)."""
        lists = [source.list_objects(group, kind, namespace) for source in self._lookups]
        listed = [items for items in lists if items is not None]
        return [obj for items in listed for obj in items] if listed else None

    def __bool__(self) -> bool:
        return True


class ApiLookup:
    """Objects read from the API server, cached; a client is made on first use."""

    TTL = 30.0
    MISS_TTL = 5.0
    TIMEOUT = 2.0
    MAX_ENTRIES = 2_000

    def __init__(self, kubeconfig: str | None = None, api: Any = None) -> None:
        self._kubeconfig = kubeconfig
        self._api = api
        self._cache: dict[Key, tuple[float, dict | None]] = {}
        self._lists: dict[ListKey, tuple[float, list[dict] | None]] = {}

    def _client(self) -> Any:
        if self._api is None:
            from gpuguard.kubeapi.client import connect, custom_objects  # only here: files need no client

            self._api = custom_objects(connect(self._kubeconfig).api)
        return self._api

    def fetch(self, key: Key) -> dict | None:
        """Read ``key`` from the API (or the cache); ``None`` when it does not exist or can't be read."""
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        from gpuguard.kubeapi.client import ApiError, KubeConfigError

        group, kind, namespace, name = key
        version, plural = READABLE.get((group, kind)) or READABLE_CORE[(group, kind)]
        obj: dict | None = None
        try:
            api = self._client()
            if not group and namespace and getattr(api, "api_client", None) is not None:
                obj = self._core(api, version, namespace, plural, name)  # /api/v1: the custom-objects client can't
            elif namespace:
                obj = api.get_namespaced_custom_object(group, version, namespace, plural, name,
                                                       _request_timeout=self.TIMEOUT)
            else:
                obj = api.get_cluster_custom_object(group, version, plural, name, _request_timeout=self.TIMEOUT)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("lookup of %s %s/%s failed: HTTP %s", kind, namespace or "", name, exc.status)
        except KubeConfigError as exc:
            log.warning("lookup of %s %s impossible: %s", kind, name, exc)
        except Exception as exc:  # network errors, timeouts: a miss, retried after MISS_TTL
            log.warning("lookup of %s %s/%s failed: %s", kind, namespace or "", name, type(exc).__name__)
        if len(self._cache) >= self.MAX_ENTRIES:
            self._cache.clear()
        self._cache[key] = (time.monotonic() + (self.TTL if obj is not None else self.MISS_TTL),
                            obj if isinstance(obj, dict) else None)
        return self._cache[key][1]

    def _core(self, api: Any, version: str, namespace: str, plural: str, name: str) -> Any:
        """A core object (``/api/v1/namespaces/NS/PLURAL/NAME``), read as JSON."""
        return self._core_json(api, f"/api/{version}/namespaces/{namespace}/{plural}/{name}")

    def _core_json(self, api: Any, path: str) -> Any:
        """A GET of a core API path, parsed: the custom-objects client can only build ``/apis/{group}/...``."""
        import orjson

        from gpuguard.kubeapi.client import request

        return orjson.loads(request(api.api_client, "GET", path, timeout=self.TIMEOUT).data)

    def __call__(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        if (group, kind) not in READABLE and (group, kind) not in READABLE_CORE:
            return None
        return self.fetch((group, kind, namespace, name))

    def cached(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """Only what is cached (the server's engine call, after ``prefetch``)."""
        hit = self._cache.get((group, kind, namespace, name))
        return hit[1] if hit is not None else None


    def list_objects(self, group: str, kind: str, namespace: str | None) -> list[dict] | None:
        """List a kind from the API (or the cache); ``None`` when it can't be listed (errors are logged)."""
        core = (group, kind) in LISTABLE_CORE
        if (group, kind) not in READABLE and not (core and namespace):
            return None
        key = (group, kind, namespace)
        hit = self._lists.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        from gpuguard.kubeapi.client import ApiError, KubeConfigError

        version, plural = LISTABLE_CORE[(group, kind)] if core else READABLE[(group, kind)]
        items: list[dict] | None = None
        try:
            api = self._client()
            if core and namespace:
                listed = self._core_list(api, version, namespace, plural)
            elif namespace:
                listed = api.list_namespaced_custom_object(group, version, namespace, plural,
                                                           _request_timeout=self.TIMEOUT)
            else:
                listed = api.list_cluster_custom_object(group, version, plural, _request_timeout=self.TIMEOUT)
            raw = listed.get("items") if isinstance(listed, dict) else None
            items = [i for i in raw if isinstance(i, dict)] if isinstance(raw, list) else None
        except ApiError as exc:
            log.warning("listing %s in %s failed: HTTP %s", kind, namespace or "the cluster", exc.status)
        except KubeConfigError as exc:
            log.warning("listing %s impossible: %s", kind, exc)
        except Exception as exc:  # network errors, timeouts: unlisted, retried after MISS_TTL
            log.warning("listing %s in %s failed: %s", kind, namespace or "the cluster", type(exc).__name__)
        if len(self._lists) >= self.MAX_ENTRIES:
            self._lists.clear()
        self._lists[key] = (time.monotonic() + (self.TTL if items is not None else self.MISS_TTL), items)
        return items

    def _core_list(self, api: Any, version: str, namespace: str, plural: str) -> Any:
        """A namespace's core objects of a kind (``/api/v1/namespaces/NS/PLURAL``), read as JSON (a client without
        an ``api_client``, a stand-in, is asked as for a custom object of the core group)."""
        if getattr(api, "api_client", None) is None:
            return api.list_namespaced_custom_object("", version, namespace, plural, _request_timeout=self.TIMEOUT)
        return self._core_json(api, f"/api/{version}/namespaces/{namespace}/{plural}")

    def stale_list(self, group: str, kind: str, namespace: str | None) -> bool:
        """Whether listing a kind in ``namespace`` would call the API now (no fresh answer cached)."""
        hit = self._lists.get((group, kind, namespace))
        return hit is None or hit[0] <= time.monotonic()

    def cached_list(self, group: str, kind: str, namespace: str | None) -> list[dict] | None:
        """Only what is cached (the server's engine call, after ``prefetch``)."""
        hit = self._lists.get((group, kind, namespace))
        return hit[1] if hit is not None else None

    def prefetch(self, obj: Any, namespace: str | None) -> None:
        """Make the reads and lists the engine will make for ``obj`` (blocking: the server runs it in a thread)."""
        spec = lookup(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
        if spec is None:
            return
        if spec.runtime is not None:
            key = runtime_of(obj, spec.runtime, namespace)
            if key is not None and (key[0], key[1]) in READABLE:
                self.fetch(key)
        if spec.merged_runtime is not None:
            spec.merged_runtime.resolve(obj, namespace, self, self.list_objects)
        if namespace:
            for name in shared_claims(obj, spec):
                self.fetch(("", "PersistentVolumeClaim", namespace, name))


def reads_objects(obj: Any) -> bool:
    """Whether judging ``obj`` reads other objects (a runtime, the claims its pods share), so the server
    prefetches them."""
    spec = lookup(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    return spec is not None and (spec.runtime is not None or spec.merged_runtime is not None
                                 or bool(shared_claims(obj, spec)))
