"""vLLM AIBrix orchestration (``orchestration.aibrix.ai``): StormService, RoleSet and PodSet.

A StormService runs ``replicas`` RoleSets from its ``template``; a RoleSet's ``roles`` (prefill,
decode, routers ...) each run ``replicas`` instances of ``podGroupSize`` pods (default 1) from the
role's pod ``template``; the RoleSet controller makes a PodSet of ``podGroupSize`` pods for each
multi-pod instance.  Every template is a PodTemplateSpec, so GPUs, Neuron devices and the rest are
read as in any pod, and CEL follows the role list.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import Creates, KindSpec, Operator, TemplateRef
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, dicts, get_path

# AIBrix's release manifests (aibrix-system): RoleSets of a StormService, PodSets and Pods of a RoleSet, Pods of
# a PodSet.
AIBRIX_CONTROLLER = Operator("aibrix", ("system:serviceaccount:aibrix-system:aibrix-controller-manager",))


def _roles(obj: dict, prefix: Path, sets: int) -> Iterator[TemplateRef]:
    """Each role of a RoleSet spec at ``prefix``: ``sets`` x replicas x podGroupSize pods."""
    for i, role in dicts(get_path(obj, prefix + ("roles",))):
        name = role.get("name")
        pods = count(role.get("replicas")) * max(count(role.get("podGroupSize")), 1)
        base = prefix + ("roles", i, "template")
        yield TemplateRef(name if isinstance(name, str) and name else f"role-{i}", base + ("spec",),
                          base + ("metadata",), sets * pods)


def _stormservice(obj: dict) -> Iterator[TemplateRef]:
    yield from _roles(obj, ("spec", "template", "spec"), count(get_path(obj, ("spec", "replicas"))))


def _roleset(obj: dict) -> Iterator[TemplateRef]:
    yield from _roles(obj, ("spec",), 1)


def _podset(obj: dict) -> Iterator[TemplateRef]:
    pods = max(count(get_path(obj, ("spec", "podGroupSize"))), 1)
    yield TemplateRef("pod", ("spec", "template", "spec"), ("spec", "template", "metadata"), pods)


_GROUP = "orchestration.aibrix.ai"
STORMSERVICE = KindSpec(_GROUP, "StormService", "stormservices", ("v1alpha1",), "inference", _stormservice,
                        pod_spec_paths=(("spec", "template", "spec", "roles", "[]", "template", "spec"),),
                        controllers=(Creates(AIBRIX_CONTROLLER, (f"{_GROUP}/RoleSet",)),), class_fixed=True)
ROLESET = KindSpec(_GROUP, "RoleSet", "rolesets", ("v1alpha1",), "inference", _roleset,
                   pod_spec_paths=(("spec", "roles", "[]", "template", "spec"),),
                   controllers=(Creates(AIBRIX_CONTROLLER, ("Pod", f"{_GROUP}/PodSet")),), class_fixed=True)
PODSET = KindSpec(_GROUP, "PodSet", "podsets", ("v1alpha1",), "inference", _podset,
                  pod_spec_paths=(("spec", "template", "spec"),),
                  controllers=(Creates(AIBRIX_CONTROLLER, ("Pod",)),), class_fixed=True)
