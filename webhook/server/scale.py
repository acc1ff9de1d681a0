"""The ``scale`` subresource, validated as what it is: an UPDATE of the workload's replicas.

``kubectl scale`` (and an autoscaler) write an ``autoscaling/v1`` Scale, not the workload, so
the apiserver sends gpuguard a review whose object has no pod template.  Per-workload caps
(GPUs in total) would be bypassed by create-small-then-scale.  So the server reads the workload
the Scale belongs to, lays the new replica count into a copy (``KindSpec.scale_replicas``), and
asks the engine to validate that copy as an UPDATE of the stored workload: the usual UPDATE
rules then hold (only what the scaling changes can be denied).

Reading the workload is the one API call on this path; it needs ``get`` on the scalable kinds
(``deploy/base/rbac.yaml``).  When it fails, the review is answered per ``failureMode``.  The
API client is imported on the first Scale review, not with the server: the ``kubernetes``
package is about 10 MiB of a worker's memory, and a server that never sees a Scale never needs it.
"""

from __future__ import annotations

from typing import Any

import orjson

from gpuguard.webhook.server.envelope import AdmissionRequest, GroupVersionKind
from gpuguard.workloads.kinds import KindSpec, by_resource
from gpuguard.workloads.paths import get_path


class ScaleError(Exception):
    """The scaled workload could not be read or the Scale is malformed; the message says which."""


def scalable_kind(req: AdmissionRequest) -> KindSpec | None:
    """The workload kind behind a ``scale`` subresource request, if gpuguard checks it."""
    spec = by_resource(req.resource.group, req.resource.resource)
    return spec if spec is not None and spec.scale_replicas is not None else None


def _replicas(scale: Any) -> int:
    replicas = get_path(scale, ("spec", "replicas"))
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ScaleError("the Scale has no valid spec.replicas")
    return replicas


def scaled(parent: dict, kind: KindSpec, replicas: int) -> dict:
    """A copy of ``parent`` with ``replicas`` where its Scale's ``spec.replicas`` lands."""
    assert kind.scale_replicas is not None
    copy = orjson.loads(orjson.dumps(parent))
    node = copy
    for step in kind.scale_replicas[:-1]:
        node = node.setdefault(step, {})
    node[kind.scale_replicas[-1]] = replicas
    return copy


def as_workload_update(req: AdmissionRequest, kind: KindSpec, parent: dict) -> AdmissionRequest:
    """The scale review recast as an UPDATE of the workload (object = scaled copy, oldObject = stored)."""
    gvk = GroupVersionKind(group=kind.group, version=req.resource.version, kind=kind.kind)
    return req.model_copy(update={
        "object": scaled(parent, kind, _replicas(req.object)), "old_object": parent, "operation": "UPDATE",
        "sub_resource": None, "kind": gvk,
    })


class WorkloadReader:
    """Reads the workload a Scale belongs to, with a client made on first use (kubeconfig or in-cluster)."""

    TIMEOUT = 2.0

    def __init__(self, kubeconfig: str | None) -> None:
        self._kubeconfig = kubeconfig
        self._api: Any = None

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
