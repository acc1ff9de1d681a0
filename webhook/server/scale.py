"""The ``scale`` subresource, validated as what it is: an UPDATE of the workload's replicas.

``kubectl scale`` (and an autoscaler) write an ``autoscaling/v1`` Scale, not the workload, so
the apiserver sends gpuguard a review whose object has no pod template.  Per-workload caps
(GPUs in total) would be bypassed by create-small-then-scale.  So the server reads the workload
the Scale belongs to, lays the new replica count into a copy (``KindSpec.scale_replicas``, or for a custom
resource whose kind declares none, its CRD's ``specReplicasPath``, read from the cluster), and
asks the engine to validate that copy as an UPDATE of the stored workload: the usual UPDATE
rules then hold (only what the scaling changes can be denied).

Reading the workload is the one API call on this path; it needs ``get`` on the scalable kinds
(``deploy/base/rbac.yaml``).  When it fails, the review is answered per ``failureMode``.  The
API client is imported on the first Scale review, not with the server: the ``kubernetes``
package is about 10 MiB of a worker's memory, and a server that never sees a Scale never needs it.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gpuguard.webhook.server.envelope import AdmissionRequest, GroupVersionKind
from gpuguard.workloads.kinds import KindSpec, by_resource
from gpuguard.workloads.paths import Path, get_path

_CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class ScaleError(Exception):
    """The scaled workload could not be read or the Scale is malformed; the message says which."""


def scalable_kind(req: AdmissionRequest) -> KindSpec | None:
    """The workload kind behind a ``scale`` subresource request, if gpuguard checks it."""
    spec = by_resource(req.resource.group, req.resource.resource)
    return spec if spec is not None and spec.scalable else None


def replicas_path(spec_replicas_path: Any) -> Path:
    """A CRD's ``specReplicasPath`` (``.spec.tfReplicaSpecs.Worker.replicas``; the apiserver allows only a plain
    dotted path under ``.spec``) as a path; ScaleError for anything else."""
    if not isinstance(spec_replicas_path, str) or not spec_replicas_path.startswith(".spec."):
        raise ScaleError(f"the CRD's scale specReplicasPath {spec_replicas_path!r} is not a path under .spec")
    steps = tuple(spec_replicas_path[1:].split("."))
    if any(not step or "[" in step for step in steps):
        raise ScaleError(f"the CRD's scale specReplicasPath {spec_replicas_path!r} is not a plain dotted path")
    return steps


def _replicas(scale: Any) -> int:
    replicas = get_path(scale, ("spec", "replicas"))
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ScaleError("the Scale has no valid spec.replicas")
    return replicas


def scaled(parent: dict, path: Path, replicas: int) -> dict:
    """A copy of ``parent`` with ``replicas`` at ``path``, where its Scale's ``spec.replicas`` lands."""
    copy = orjson.loads(orjson.dumps(parent))
    node = copy
    for step in path[:-1]:
        node = node.setdefault(step, {})
        if not isinstance(node, dict):
            raise ScaleError(f"the scaled object has no object at {'.'.join(map(str, path[:-1]))}")
    node[path[-1]] = replicas
    return copy


def as_workload_update(req: AdmissionRequest, kind: KindSpec, parent: dict,
                       path: Path | None = None) -> AdmissionRequest:
    """The scale review recast as an UPDATE of the workload (object = scaled copy, oldObject = stored); ``path``:
    where the replicas land (default: the kind's declared ``scale_replicas``)."""
    path = path or kind.scale_replicas
    if path is None:
        raise ScaleError(f"gpuguard does not know where a {kind.kind}'s Scale lands")
    gvk = GroupVersionKind(group=kind.group, version=req.resource.version, kind=kind.kind)
    return req.model_copy(update={
        "object": scaled(parent, path, _replicas(req.object)), "old_object": parent, "operation": "UPDATE",
        "sub_resource": None, "kind": gvk,
    })


class WorkloadReader:
    """Reads the workload a Scale belongs to, with a client made on first use (kubeconfig or in-cluster), and
    where a custom resource's Scale lands from its CRD (cached ``CRD_TTL`` seconds, one entry per kind)."""

    TIMEOUT = 2.0
    CRD_TTL = 300.0

    def __init__(self, kubeconfig: str | None) -> None:
        self._kubeconfig = kubeconfig
        self._api: Any = None
        self._paths: dict[tuple[str, str, str], tuple[Path, float]] = {}

    def replicas_path(self, req: AdmissionRequest, kind: KindSpec) -> Path:
        """Where ``req``'s Scale lands: the kind's declared path, else its CRD's ``specReplicasPath`` for the
        version scaled (the CRD declares the scale subresource, or no Scale would have been sent)."""
        if kind.scale_replicas is not None:
            return kind.scale_replicas
        key = (req.resource.group, req.resource.resource, req.resource.version)
        cached = self._paths.get(key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        from gpuguard.kubeapi.client import ApiError, KubeConfigError, connect, request

        name = f"{req.resource.resource}.{req.resource.group}"
        try:
            api = connect(self._kubeconfig).api
            crd = orjson.loads(request(api, "GET", f"{_CRDS}/{name}", timeout=self.TIMEOUT).data)
        except KubeConfigError as exc:
            raise ScaleError(f"cannot read the CRD {name}: {exc}") from None
        except ApiError as exc:
            raise ScaleError(f"cannot read the CRD {name}: HTTP {exc.status} {exc.reason}") from None
        except Exception as exc:  # network errors, timeouts
            raise ScaleError(f"cannot read the CRD {name}: {type(exc).__name__}") from None
        version = next((v for v in (crd.get("spec") or {}).get("versions") or []
                        if isinstance(v, dict) and v.get("name") == req.resource.version), None)
        scale = ((version or {}).get("subresources") or {}).get("scale")
        if not isinstance(scale, dict):
            raise ScaleError(f"the CRD {name} declares no scale subresource for {req.resource.version}")
        path = replicas_path(scale.get("specReplicasPath"))
        self._paths[key] = (path, time.monotonic() + self.CRD_TTL)
        return path

    def read(self, req: AdmissionRequest) -> dict:
        from gpuguard.kubeapi.client import ApiError, KubeConfigError, connect, custom_objects

        try:
            if self._api is None:
                self._api = custom_objects(connect(self._kubeconfig).api)
            # Every scalable kind gpuguard checks lives in a named API group, so the generic
            # group/version/plural path serves apps/v1 and CRDs alike.
            obj = self._api.get_namespaced_custom_object(
                req.resource.group, req.resource.version, req.namespace or "", req.resource.resource,
                req.name or "", _request_timeout=self.TIMEOUT)
        except KubeConfigError as exc:
            raise ScaleError(f"cannot read the scaled {req.resource.resource}: {exc}") from None
        except ApiError as exc:
            raise ScaleError(f"cannot read the scaled {req.resource.resource} {req.name}: HTTP {exc.status} "
                             f"{exc.reason}") from None
        except Exception as exc:  # network errors, timeouts
            raise ScaleError(f"cannot read the scaled {req.resource.resource} {req.name}: "
                             f"{type(exc).__name__}") from None
        if not isinstance(obj, dict):
            raise ScaleError(f"the scaled {req.resource.resource} {req.name} is not an object")
        return obj
