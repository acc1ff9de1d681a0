"""Which of gpuguard's kinds (and the runtimes they name) this cluster serves, and where to list them.

Asked again at every resync, so a CRD installed after the scan started (a Kubeflow Trainer, KServe)
gets its watch without a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gpuguard.kubeapi.client import ApiError, request
from gpuguard.webhook.objects import READABLE
from gpuguard.workloads.kinds import TEMPLATE_HOLDERS, KindSpec, all_kinds, lookup_group_kind
from gpuguard.workloads.kinds.configured import unknown_pod_kinds

CRDS_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@dataclass(frozen=True)
class Collection:
    """One resource collection to watch across all namespaces."""

    group: str
    version: str
    kind: str
    plural: str
    spec: KindSpec | None = None  # a workload kind; None for a runtime kind

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        if self.group:
            return f"/apis/{self.group}/{self.version}/{self.plural}"
        return f"/api/{self.version}/{self.plural}"

    def object_path(self, namespace: str | None, name: str) -> str:
        """Where one object of the collection is read (``GET``)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        where = f"/namespaces/{namespace}" if namespace else ""
        return f"{root}{where}/{self.plural}/{name}"


class Discovery:
    """API discovery with one request per group version, cached for one call of ``collections``."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.notes: list[str] = []

    def _served(self, group: str, version: str, cache: dict[str, set[str]]) -> set[str]:
        gv = f"{group}/{version}" if group else version
        if gv not in cache:
            path = f"/apis/{gv}" if group else f"/api/{gv}"
            try:
                body = orjson.loads(request(self.api, "GET", path, timeout=10).data)
                cache[gv] = {r.get("name") for r in body.get("resources") or [] if "watch" in (r.get("verbs") or [])}
            except ApiError as exc:
                if exc.status != 404:
                    self.notes.append(f"discovery of {gv} failed: HTTP {exc.status}")
                cache[gv] = set()
        return cache[gv]

    def serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the cluster serves ``plural`` in ``group/version`` (e.g. the PolicyReport CRD)."""
        return plural in self._served(group, version, {})

    def _unknown(self, known: set[tuple[str, str]]) -> list[Collection]:
        """Custom resources gpuguard has no kind for whose schema holds a PodSpec: watched too, so that those asking
        for accelerators are reported (not fully checked: unknown kind) rather than passed in silence."""
        try:
            body = orjson.loads(request(self.api, "GET", CRDS_PATH, timeout=30).data)
        except ApiError as exc:
            self.notes.append(f"cannot list CustomResourceDefinitions (HTTP {exc.status}): kinds gpuguard doesn't "
                              "know are not looked for")
            return []
        specs, _ = unknown_pod_kinds(body.get("items") or [], lambda group, kind: (group, kind) in known
                                     or (group, kind) in TEMPLATE_HOLDERS or lookup_group_kind(group, kind) is not None)
        return [Collection(s.group, s.versions[0], s.kind, s.plural, s) for s in specs]

    def collections(self) -> tuple[list[Collection], list[Collection]]:
        """(workload collections, runtime collections) served now, each kind in the first version it has."""
        cache: dict[str, set[str]] = {}
        workloads: list[Collection] = []
        for spec in all_kinds():
            versions = spec.versions if spec.group else ("v1",)
            for version in versions:
                if spec.plural in self._served(spec.group, version, cache):
                    workloads.append(Collection(spec.group, version, spec.kind, spec.plural, spec))
                    break
        workloads += self._unknown({(c.group, c.kind) for c in workloads})
        runtimes = [Collection(group, version, kind, plural)
                    for (group, kind), (version, plural) in READABLE.items()
                    if plural in self._served(group, version, cache)]
        return workloads, runtimes
