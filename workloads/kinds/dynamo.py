"""NVIDIA Dynamo (``nvidia.com``): DynamoGraphDeployment and the DynamoComponentDeployments it makes.

A graph's ``services`` map holds one component each (frontend, prefill and decode workers ...); a
component asks for resources in Dynamo's shorthand (``resources.limits.gpu: "8"``, ``gpuType`` for
another vendor) and overrides pod fields through ``extraPodSpec`` (a PodSpec plus its
``mainContainer``): ``gpuguard.workloads.serving`` reads both.  Each of ``replicas`` (or, autoscaled,
``autoscaling.maxReplicas``) instances is ``multinode.nodeCount`` pods holding the ``gpu`` count
each.  The GPUs are in the shorthand, which CEL can't turn into extended resources: the webhook is
called for every object of these kinds.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, get_path

# The dynamo-platform Helm chart's operator (release dynamo-platform in dynamo-system, as its install guide
# does): it creates a DynamoComponentDeployment per service, and from each a Deployment, or for multinode
# components a LeaderWorkerSet (Grove's PodCliqueSets, the default orchestrator in newer releases, are not
# in the kind table: their pods are judged when created).
DYNAMO_OPERATOR = Operator("dynamo-operator",
                           ("system:serviceaccount:dynamo-system:dynamo-platform-dynamo-operator-controller-manager",))


def component_pods(component: dict) -> int:
    """Pods of one component at the most: instances (autoscaling's ``maxReplicas`` when enabled, else
    ``replicas``, default 1) x ``multinode.nodeCount`` (default 1)."""
    autoscaling = component.get("autoscaling")
    if isinstance(autoscaling, dict) and autoscaling.get("enabled") is True:
        instances = max(count(autoscaling.get("maxReplicas")), count(autoscaling.get("minReplicas")))
    else:
        instances = count(component.get("replicas"))
    multinode = component.get("multinode")
    nodes = count(multinode.get("nodeCount")) if isinstance(multinode, dict) else 1
    return instances * max(nodes, 1)


def _component(role: str, prefix: Path, component: dict) -> TemplateRef:
    return TemplateRef(role, prefix + ("extraPodSpec",), prefix + ("extraPodMetadata",), component_pods(component),
                       shape="dynamo")


def _graph(obj: dict) -> Iterator[TemplateRef]:
    services = get_path(obj, ("spec", "services"))
    if not isinstance(services, dict):
        return
    for name, component in services.items():
        if isinstance(name, str) and isinstance(component, dict):
            yield _component(name, ("spec", "services", name), component)


def _component_deployment(obj: dict) -> Iterator[TemplateRef]:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        name = spec.get("serviceName")
        yield _component(name if isinstance(name, str) and name else "component", ("spec",), spec)


DYNAMOGRAPHDEPLOYMENT = KindSpec("nvidia.com", "DynamoGraphDeployment", "dynamographdeployments", ("v1alpha1",),
                                 "inference", _graph,
                                 controllers=(Creates(DYNAMO_OPERATOR, ("nvidia.com/DynamoComponentDeployment",)),),
                                 class_fixed=True)
DYNAMOCOMPONENTDEPLOYMENT = KindSpec("nvidia.com", "DynamoComponentDeployment", "dynamocomponentdeployments",
                                     ("v1alpha1",), "inference", _component_deployment,
                                     controllers=(Creates(DYNAMO_OPERATOR, ("apps/Deployment",
                                                                            "leaderworkerset.x-k8s.io/LeaderWorkerSet")),),
                                     class_fixed=True)
