"""KubeRay (``ray.io``): RayCluster, RayJob (a cluster plus a submitter pod), RayService and RayCronJob.

A cluster is a head group and worker groups; with in-tree autoscaling a worker group may grow
to ``maxReplicas``, each replica being ``numOfHosts`` pods.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuguard.workloads.kinds.spec import (
    Creates,
    JobFields,
    KindSpec,
    Locate,
    Operator,
    PathPattern,
    ServeConfig,
    TemplateRef,
)
from gpuguard.workloads.kinds.templates import count
from gpuguard.workloads.paths import Path, get_path

# KubeRay (chart default service account kuberay-operator; namespace ray-system as documented).
KUBERAY = Operator("kuberay-operator", ("system:serviceaccount:ray-system:kuberay-operator",))


def _groups(prefix: Path) -> Locate:
    """A RayClusterSpec at ``prefix``: its head group (one pod) and worker groups."""

    def locate(obj: dict) -> Iterator[TemplateRef]:
        autoscaling = get_path(obj, prefix + ("enableInTreeAutoscaling",)) is True
        head = prefix + ("headGroupSpec", "template")
        if isinstance(get_path(obj, head), dict):
            yield TemplateRef("head", head + ("spec",), head + ("metadata",), 1)
        groups = get_path(obj, prefix + ("workerGroupSpecs",))
        if isinstance(groups, list):
            for i, group in enumerate(groups):
                if not isinstance(group, dict):
                    continue
                base = prefix + ("workerGroupSpecs", i, "template")
                replicas = max(count(group.get("replicas")), count(group.get("minReplicas"), 0))
                if autoscaling:  # the autoscaler may grow the group to maxReplicas
                    replicas = max(replicas, count(group.get("maxReplicas"), 0))
                yield TemplateRef(str(group.get("groupName", f"worker-{i}")), base + ("spec",), base + ("metadata",),
                                  replicas * count(group.get("numOfHosts")))

    return locate


def _group_paths(prefix: tuple[str, ...]) -> tuple[PathPattern, ...]:
    return (prefix + ("headGroupSpec", "template", "spec"), prefix + ("workerGroupSpecs", "[]", "template", "spec"))


def _rayjob_at(prefix: Path) -> Locate:
    """A RayJob spec at ``prefix``: its RayCluster's groups and the submitter pod."""
    groups = _groups(prefix + ("rayClusterSpec",))

    def locate(obj: dict) -> Iterator[TemplateRef]:
        yield from groups(obj)
        sub = prefix + ("submitterPodTemplate",)
        if isinstance(get_path(obj, sub), dict):
            yield TemplateRef("submitter", sub + ("spec",), sub + ("metadata",), 1)

    return locate


def _rayjob_paths(prefix: tuple[str, ...]) -> tuple[PathPattern, ...]:
    return (*_group_paths(prefix + ("rayClusterSpec",)), prefix + ("submitterPodTemplate", "spec"))


def _rayjob_fields(prefix: Path) -> JobFields:
    # ttlSecondsAfterFinished only works with shutdownAfterJobFinishes: true (``JobFields.ttl_requires_true``).
    return JobFields(ttl=prefix + ("ttlSecondsAfterFinished",), deadline=prefix + ("activeDeadlineSeconds",),
                     ttl_requires_true=prefix + ("shutdownAfterJobFinishes",))


RAYJOB = KindSpec("ray.io", "RayJob", "rayjobs", ("v1",), "training", _rayjob_at(("spec",)),
                  _rayjob_fields(("spec",)), pod_spec_paths=_rayjob_paths(("spec",)),
                  controllers=(Creates(KUBERAY, ("ray.io/RayCluster", "batch/Job")),),
                  command_paths=(("spec", "entrypoint"),))
RAYCLUSTER = KindSpec("ray.io", "RayCluster", "rayclusters", ("v1",), "inference", _groups(("spec",)),
                      pod_spec_paths=_group_paths(("spec",)), controllers=(Creates(KUBERAY, ("Pod",)),))
RAYSERVICE = KindSpec("ray.io", "RayService", "rayservices", ("v1",), "inference",
                      _groups(("spec", "rayClusterConfig")),
                      pod_spec_paths=_group_paths(("spec", "rayClusterConfig")),
                      controllers=(Creates(KUBERAY, ("ray.io/RayCluster",)),), class_fixed=True,
                      serve_config=ServeConfig(("spec", "serveConfigV2"), ("spec", "rayClusterConfig")))
RAYCRONJOB = KindSpec("ray.io", "RayCronJob", "raycronjobs", ("v1",), "training", _rayjob_at(("spec", "jobTemplate")),
                      _rayjob_fields(("spec", "jobTemplate")), pod_spec_paths=_rayjob_paths(("spec", "jobTemplate")),
                      command_paths=(("spec", "jobTemplate", "entrypoint"),))
