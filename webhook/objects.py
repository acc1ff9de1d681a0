"""Reading the objects a workload names (a TrainJob's runtime), for ``RequestContext.read_object``.

Three sources, one shape — ``(group, kind, namespace or None, name) -> object or None``:

* ``StaticLookup``: the audit's own input (a runtime and its TrainJobs in the same manifests);
* ``ApiLookup``: the API server, through ``kubeapi``, each answer cached for ``TTL`` seconds
  (misses too, for less), for ``audit --cluster`` and the webhook server.  The server never
  blocks its event loop on it: ``prefetch`` runs the read in a thread before the engine, which
  then only reads the cache.  It needs ``get`` on the runtime kinds (``deploy/base/rbac.yaml``).

Which kinds can be read, and where, comes from the kind table (``KindSpec.runtime.resources``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from gpuguard.workloads.kinds import KINDS, lookup, runtime_of

log = logging.getLogger("gpuguard.lookup")
Key = tuple[str, str, str | None, str]

# (group, kind) -> (version, plural) for every kind a workload may name.
READABLE: dict[tuple[str, str], tuple[str, str]] = {
    (spec.runtime.group, kind): (version, plural)
    for spec in KINDS if spec.runtime is not None for kind, version, plural in spec.runtime.resources
}


def _key_of(obj: dict) -> Key | None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(meta.get("name"), str):
        return None
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    if (group, kind) not in READABLE:
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

    def __bool__(self) -> bool:
        return bool(self._objects)


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
        version, plural = READABLE[(group, kind)]
        obj: dict | None = None
        try:
            api = self._client()
            if namespace:
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

    def __call__(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        if (group, kind) not in READABLE:
            return None
        return self.fetch((group, kind, namespace, name))

    def cached(self, group: str, kind: str, namespace: str | None, name: str) -> dict | None:
        """Only what is cached (the server's engine call, after ``prefetch``)."""
        hit = self._cache.get((group, kind, namespace, name))
        return hit[1] if hit is not None else None


def runtime_key(obj: Any, namespace: str | None) -> Key | None:
    """The runtime an object names, as a lookup key (for the server's prefetch), or ``None``."""
    spec = lookup(obj.get("apiVersion"), obj.get("kind")) if isinstance(obj, dict) else None
    if spec is None or spec.runtime is None:
        return None
    key = runtime_of(obj, spec.runtime, namespace)
    return key if key is not None and (key[0], key[1]) in READABLE else None
