"""Knative Serving (``serving.knative.dev``): a ``Service`` runs one revision's pods from ``spec.template``, scaled on
requests between the template's ``autoscaling.knative.dev/min-scale`` and ``max-scale`` annotations.

A Knative Service is a server by what it is (requests in, responses out: nothing runs to completion), so its
class is fixed.  Its pods are served through Knative, whose webhook refuses pod fields its ``config-features``
flags leave off (``features``): the engine takes back what a policy would add there.  Knative's controller
makes a Configuration, then a Revision, then the revision's Deployment; that Deployment is left as Knative made it
(the revision's template was judged as the Service's).  KServe's Serverless mode makes the Service itself from an
InferenceService (``kinds.kserve``).
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import get_path

# Knative Serving (knative-serving): the revision's Deployment, owned by the Revision.
KNATIVE_CONTROLLER = Operator("knative-serving", ("system:serviceaccount:knative-serving:controller",))

_TEMPLATE = ("spec", "template")
_REVISION = "serving.knative.dev/Revision"
# Both spellings Knative reads (the camelCase ones are the older, still accepted).
_MIN_SCALE = ("autoscaling.knative.dev/min-scale", "autoscaling.knative.dev/minScale")
_MAX_SCALE = ("autoscaling.knative.dev/max-scale", "autoscaling.knative.dev/maxScale")


def _scale(annotations: object, keys: tuple[str, ...]) -> int:
    """A scale bound from the revision template's annotations (a string of digits), 0 when unset or unreadable."""
    if not isinstance(annotations, dict):
        return 0
    for key in keys:
        value = annotations.get(key)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
    return 0


def _service(obj: dict) -> Iterator[TemplateRef]:
    """One template; its pods as far as the autoscaler may go: ``max-scale``, at least ``min-scale`` and one (with
    no max-scale the cluster's ``config-autoscaler`` bounds it, which gpuguard does not read: counted as the
    minimum, as KServe's unset ``maxReplicas`` is)."""
    annotations = get_path(obj, _TEMPLATE + ("metadata", "annotations"))
    replicas = max(_scale(annotations, _MIN_SCALE), _scale(annotations, _MAX_SCALE), 1)
    yield TemplateRef("revision", _TEMPLATE + ("spec",), _TEMPLATE + ("metadata",), count(replicas), knative=True)


SERVICE = KindSpec("serving.knative.dev", "Service", "services", ("v1",), "inference", _service,
                   pod_spec_paths=(_TEMPLATE + ("spec",),),
                   controllers=(Creates(KNATIVE_CONTROLLER, ("apps/Deployment",), owner=_REVISION),),
                   class_fixed=True)
