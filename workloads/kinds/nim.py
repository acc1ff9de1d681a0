"""NVIDIA NIM Operator (``apps.nvidia.com``): NIMService.

A NIMService is its pod and its one container at once: ``image: {repository, tag}``, ``resources``
(``nvidia.com/gpu`` limits), ``env`` beside ``tolerations`` and ``nodeSelector`` (the ``inline``
shape, ``gpuguard.workloads.serving``).  It runs ``replicas`` pods, up to ``scale.hpa.maxReplicas``
with autoscaling on; multi-node (``multiNode``, served by a LeaderWorkerSet) each replica is a group
of ``multiNode.parallelism.pipeline`` pods (one node per pipeline stage), each holding the
resources.  Devices asked for through ``draResources`` are DRA claims the operator creates from
their spec: gpuguard can't count them from the object, so such a NIMService is refused saying so
(the rule for what can't be judged), unless the admin chose ``failureMode: open``.  CEL can't read
the inline container: the webhook is called for every NIMService.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import get_path

# The k8s-nim-operator Helm chart installed as its guide does (release nim-operator in nim-operator): the
# NIMService's Deployment, or multi-node its LeaderWorkerSet.  The chart names the account after the release.
NIM_OPERATOR = Operator("nim-operator", ("system:serviceaccount:nim-operator:nim-operator-k8s-nim-operator",
                                         "system:serviceaccount:nim-operator:k8s-nim-operator"))


def nim_pods(spec: dict) -> int:
    """Pods a NIMService runs at the most: ``replicas`` (default 1), or ``scale.hpa.maxReplicas`` with
    ``scale.enabled``, times the multi-node group size (``multiNode.parallelism.pipeline``, default 1)."""
    scale = spec.get("scale")
    instances = count(spec.get("replicas"))
    if isinstance(scale, dict) and scale.get("enabled") is True:
        instances = max(instances, count(get_path(scale, ("hpa", "maxReplicas")), 0),
                        count(get_path(scale, ("hpa", "minReplicas")), 0))
    group = 1
    multinode = spec.get("multiNode")
    if isinstance(multinode, dict):
        group = max(count(get_path(multinode, ("parallelism", "pipeline"))), 1)
    return instances * group


def _nimservice(obj: dict) -> Iterator[TemplateRef]:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        yield TemplateRef("nim", ("spec",), None, nim_pods(spec), shape="inline")


NIMSERVICE = KindSpec("apps.nvidia.com", "NIMService", "nimservices", ("v1alpha1",), "inference", _nimservice,
                      controllers=(Creates(NIM_OPERATOR, ("apps/Deployment",
                                                          "leaderworkerset.x-k8s.io/LeaderWorkerSet")),),
                      class_fixed=True)
