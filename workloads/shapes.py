"""How a pod template holds its containers: one adapter per ``TemplateRef.shape``, behind one interface.

A kind's entry (``gpuguard.workloads.kinds``) says *where* its pod templates are and names the shape each is
written in; this module says what that shape means, so the workload view and the classifier ask the adapter
instead of switching on shape names.  Most kinds write a plain PodSpec (``pod``).  Operators that don't:

* ``spark``: a Spark driver/executor spec is the pod and its main container at once (``cores``, ``memory``,
  ``gpu``), and the operator writes the container's ``resources`` (``kinds.spark.operator``);
* ``dynamo``: a Dynamo service's ``extraPodSpec`` with its ``mainContainer``, resources in the service's shorthand
  (a service without ``extraPodSpec`` still has its GPUs);
* ``vllm``: a production-stack ``deploymentConfig``, resources in its shorthand;
* ``inline``: the spec is the pod and its one container (a NIMService), so its ``resources`` are the container's;
* ``kubeai``: a KubeAI Model, resources and pod fields from the config's resource profile it names.

Adding a shape: a subclass here, its name in ``TemplateRef.shape``'s ``Literal`` (the unit test holds the two
together).  The serving adapters' containers live in ``gpuguard.workloads.serving``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from gpuguard.workloads.accelerators import Accelerators
from gpuguard.workloads.containers import Container, SparkContainer
from gpuguard.workloads.kinds import TemplateRef
from gpuguard.workloads.paths import Path, child_dict, get_path
from gpuguard.workloads.serving import (
    dynamo_container,
    inline_container,
    kubeai_container,
    kubeai_pod_fields,
    kubeai_unread,
    nim_unread,
    vllm_container,
)


class PodShape:
    """A plain PodSpec: containers in its lists (and single-container keys), pod-level ``resources`` its own.
    Every method is a question the view asks of any template; the plain shape answers "nothing more"."""

    name: ClassVar[str] = "pod"
    # Its ``resources`` field is the pod's (pod-level resources), not the main container's.
    pod_level_resources: ClassVar[bool] = True
    # The spec itself may read as a container (image, command, args) to the classifier.
    spec_is_container: ClassVar[bool] = False
    # The operator writes the pod its own way (a main container made from the spec): the pod as it will be is
    # gathered for policies (``PodTemplate.pod_spec``), not the spec itself.
    adapted: ClassVar[bool] = False

    def spec_where_absent(self, obj: dict, ref: TemplateRef) -> dict | None:
        """A spec to create where the template has none yet, when the shape's containers exist without it
        (``None``: no spec, no template)."""
        return None

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        """The container the operator makes from the spec itself, outside its container lists."""
        return None

    def inherited_pod_fields(self, spec: dict, accelerators: Accelerators) -> dict[str, Any]:
        """Pod fields the operator takes from elsewhere, shown to policies in the template."""
        return {}

    def unread_claims(self, spec: dict, spec_path: Path, accelerators: Accelerators) -> list[tuple[Path, str]]:
        """Devices the spec asks for in a form gpuguard can't count: (path, why), refused as not fully checked."""
        return []


class SparkShape(PodShape):
    name = "spark"
    adapted = True

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        app = get_path(obj, ref.spec_path[:-1])
        return SparkContainer(ref.role, spec, ref.spec_path, app if isinstance(app, dict) else {}, accelerators)


class ServingShape(PodShape):
    """A serving operator's own shape: the spec may hold the container's fields itself."""

    spec_is_container = True
    adapted = True


class DynamoShape(ServingShape):
    name = "dynamo"

    def spec_where_absent(self, obj: dict, ref: TemplateRef) -> dict | None:
        parent, key = get_path(obj, ref.spec_path[:-1]), ref.spec_path[-1]
        return child_dict(parent, key) if isinstance(parent, dict) and isinstance(key, str) else None

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        return dynamo_container(obj, ref.spec_path, spec, accelerators)


class VllmShape(ServingShape):
    name = "vllm"

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        return vllm_container(obj, ref.spec_path, spec, accelerators)


class InlineShape(ServingShape):
    name = "inline"
    pod_level_resources = False  # a NIMService's ``resources`` are its one container's

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        return inline_container(obj, ref.spec_path, spec, accelerators)

    def unread_claims(self, spec: dict, spec_path: Path, accelerators: Accelerators) -> list[tuple[Path, str]]:
        return nim_unread(spec, spec_path)


class KubeAIShape(ServingShape):
    name = "kubeai"

    def main_container(self, obj: dict, ref: TemplateRef, spec: dict, accelerators: Accelerators) -> Container | None:
        return kubeai_container(spec, ref.spec_path, accelerators)

    def inherited_pod_fields(self, spec: dict, accelerators: Accelerators) -> dict[str, Any]:
        return kubeai_pod_fields(spec, accelerators)

    def unread_claims(self, spec: dict, spec_path: Path, accelerators: Accelerators) -> list[tuple[Path, str]]:
        return kubeai_unread(spec, spec_path, accelerators)


SHAPES: dict[str, PodShape] = {shape.name: shape for shape in (
    PodShape(), SparkShape(), DynamoShape(), VllmShape(), InlineShape(), KubeAIShape())}


def shape_of(ref: TemplateRef) -> PodShape:
    """The adapter for a template's shape (every name ``TemplateRef.shape`` allows has one)."""
    return SHAPES[ref.shape]
