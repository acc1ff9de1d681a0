"""LeaderWorkerSet (``leaderworkerset.x-k8s.io``): ``replicas`` groups of ``size`` pods, one leader
(from ``leaderTemplate``, else the worker template) and ``size - 1`` workers each."""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, ServingGroup, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import get_path

# LeaderWorkerSet (lws-system): the leader StatefulSet (owned by the LWS) and each group's worker
# StatefulSet (owned by the group's leader Pod).
LWS_CONTROLLER = Operator("lws", ("system:serviceaccount:lws-system:lws-controller-manager",))

_TEMPLATE: tuple[str, ...] = ("spec", "leaderWorkerTemplate")


def _lws(obj: dict) -> Iterator[TemplateRef]:
    groups = count(get_path(obj, ("spec", "replicas")))
    size = count(get_path(obj, _TEMPLATE + ("size",)))
    if isinstance(get_path(obj, _TEMPLATE + ("leaderTemplate",)), dict):
        yield TemplateRef("leader", _TEMPLATE + ("leaderTemplate", "spec"), _TEMPLATE + ("leaderTemplate", "metadata"),
                          groups)
        workers = groups * max(size - 1, 0)
    else:
        workers = groups * size
    yield TemplateRef("worker", _TEMPLATE + ("workerTemplate", "spec"), _TEMPLATE + ("workerTemplate", "metadata"),
                      workers)


def _groups(obj: dict) -> Iterator[ServingGroup]:
    """Each of the ``replicas`` groups runs one server over its ``size`` pods (vLLM or SGLang over Ray, an MPI
    launch of TensorRT-LLM): the leader, from ``leaderTemplate`` or else the worker template, and the workers."""
    size = count(get_path(obj, _TEMPLATE + ("size",)))
    leader = "leader" if isinstance(get_path(obj, _TEMPLATE + ("leaderTemplate",)), dict) else "worker"
    groups = count(get_path(obj, ("spec", "replicas")))
    yield ServingGroup(leader, "worker", size, "spec.leaderWorkerTemplate.size", groups)


LEADERWORKERSET = KindSpec("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ("v1",), "inference",
                           _lws, scale_replicas=("spec", "replicas"),
                           pod_spec_paths=(_TEMPLATE + ("leaderTemplate", "spec"),
                                           _TEMPLATE + ("workerTemplate", "spec")),
                           controllers=(Creates(LWS_CONTROLLER, ("apps/StatefulSet",)),
                                        Creates(LWS_CONTROLLER, ("apps/StatefulSet",), owner="Pod")),
                           serving_groups=_groups)
