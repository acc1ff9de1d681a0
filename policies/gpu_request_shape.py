"""gpu-request-shape: GPU requests a scheduler can satisfy, caught at admission.

Extended resources are whole numbers that can't be overcommitted: a request must equal
its limit.  The apiserver checks that when a Pod is created, not when a PyTorchJob or
JobSet is, so a bad template in a custom resource only fails later, pod by pod, while the
other pods hold GPUs.  A pod asking for more of an accelerator than its profile's
``maxPerNode`` (with a node inventory: than the largest node that has it) or a workload over the
configured total pends forever.  Counts follow the
kubelet: native sidecars (init containers with ``restartPolicy: Always``) add to the app
containers, regular init containers are maxed, and DRA claims count their devices.  A claim
gpuguard cannot resolve is a warning, never a silent zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from fnmatch import fnmatchcase

from pydantic import Field

from gpuguard.policies.base import Finding, PolicySettings, ValidatingPolicy, accelerator_objects_only
from gpuguard.workloads import quantity
from gpuguard.workloads.accelerators import Profile
from gpuguard.workloads.inventory import Inventory
from gpuguard.workloads.paths import dotted
from gpuguard.workloads.view import Container, PodTemplate, WorkloadView


class Settings(PolicySettings):
    max_gpus_per_workload: int | None = Field(64, ge=1, description="GPUs one workload may ask for in all.")
    max_cpu_per_node: str | None = Field(None, description="Allocatable CPU of the largest GPU node.")
    max_memory_per_node: str | None = Field(None, description="Allocatable memory of the largest GPU node.")
    daemon_set_namespaces: list[str] = Field(
        default_factory=list, description="Namespace names or globs where a DaemonSet may ask for accelerators "
        "(it holds them on every node it lands on); none by default.")


def _when(view: WorkloadView) -> str:
    if view.kind.validated_by_apiserver:
        return "the apiserver rejects the pod"
    return f"the {view.kind.kind} is accepted but each pod it creates is rejected"


def _container_findings(view: WorkloadView, container: Container) -> Iterator[Finding]:
    res = container.resources() or {}
    requests, limits = res.get("requests"), res.get("limits")
    requests = requests if isinstance(requests, dict) else {}
    limits = limits if isinstance(limits, dict) else {}
    for resource in container.gpus:
        req, lim = quantity.parse(requests.get(resource)), quantity.parse(limits.get(resource))
        amount = lim if lim is not None else req
        if amount is not None and amount != amount.to_integral_value() and container.profiles[resource].whole_only:
            yield Finding(container.path, f"{resource} is {amount}: it is allocated in whole units and a fraction "
                          "can never be scheduled", "ask for a whole number, or a slice or shared resource if the "
                          "cluster offers one (see `gpuguard explain gpu-request-shape`)", container.name)
        elif lim is None:
            yield Finding(container.path, f"{resource} is requested without a limit: {_when(view)} (limit must be "
                          "set for non-overcommitable resources)", f"set limits.{resource} equal to the request",
                          container.name)
        elif req is not None and req != lim:
            yield Finding(container.path, f"requests.{resource} ({req}) differs from limits ({lim}): "
                          f"{_when(view)} (extended resources can't be overcommitted)",
                          f"set requests.{resource} equal to limits.{resource}, or drop the request",
                          container.name)


def _cap(template: PodTemplate, profile: Profile, names: list[str], inventory: Inventory) -> tuple[int | None, str]:
    """The most one node holds of ``names``: the inventory's largest eligible node, else the profile's maxPerNode."""
    if not inventory.known:
        cap = profile.max_per_node
        return cap, f"a node has at most {cap} ({profile.name} profile)"
    found: tuple[int | None, str] = inventory.memo(("cap", tuple(names)), lambda: _largest(inventory, names))
    return found


def _largest(inventory: Inventory, names: list[str]) -> tuple[int | None, str]:
    groups = inventory.eligible(n for n in names if "/" in n)
    if not groups or any(not g.shape_known for g in groups):
        return None, ""  # nothing offers it (schedulable says so), or a pool of unknown shape may
    big = max(groups, key=lambda g: sum((g.amount(n) or 0 for n in names), Decimal(0)))
    cap = int(sum((big.amount(n) or 0 for n in names), Decimal(0)))
    return cap, f"the largest eligible node has {cap} ({big.describe()})"


def _node_caps(template: PodTemplate, inventory: Inventory) -> Iterator[Finding]:
    for profile in template.profiles:
        per_pod = template.per_profile.get(profile.name, 0)
        names = sorted(n for n, p in template.profile_of.items() if p.name == profile.name
                       and n in template.effective_gpus)
        cap, where = _cap(template, profile, names, inventory)
        if cap is not None and per_pod > cap:
            yield Finding(template.spec_path, f"a pod asks for {per_pod} {', '.join(names)} (counting sidecars and "
                          f"DRA claims) but {where}: it would pend forever",
                          f"use at most {cap} per pod and add workers instead")


def validate(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    for template in view.templates:
        for path, message in template.unresolved_claims:
            yield Finding(path, message, "create the claim (template) first, or check the name and namespace",
                          advisory=True)
    for template in view.gpu_templates:
        for container in template.gpu_containers:
            yield from _container_findings(view, container)
        yield from _node_caps(template, view.inventory)
        for name, limit_text in (("cpu", settings.max_cpu_per_node), ("memory", settings.max_memory_per_node)):
            limit = quantity.parse(limit_text)
            if limit is None:
                continue
            asked = template.pod_request(name)
            if asked > limit:
                yield Finding(template.spec_path, f"a pod requests {name} {asked} but the largest GPU node has "
                              f"{limit_text}: it would pend forever", f"request at most {limit_text} {name} per pod")
    for template in view.gpu_templates:
        if template.ref.unbounded is not None:
            yield Finding(template.spec_path, f"{template.ref.role} pods scale without a maximum, "
                          f"{template.gpus_per_pod} accelerator(s) each: the workload can take every free GPU",
                          f"set {dotted(template.ref.unbounded)}", template.ref.role,
                          advisory=settings.max_gpus_per_workload is None)
    if view.kind.per_node and view.gpu_templates:
        yield from _daemon_set_namespace(view, settings)
    total = view.total_gpus
    if view.kind.per_node and view.inventory.known:
        yield from _per_node_total(view, settings)
        return
    if settings.max_gpus_per_workload is not None and total > settings.max_gpus_per_workload:
        yield Finding(("spec",), f"the workload asks for {total} accelerators in all, over the limit of "
                      f"{settings.max_gpus_per_workload} per workload: its pods would pend on quota",
                      "lower replicas or accelerators per pod, or ask the platform team for a larger limit")


def _daemon_set_namespace(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    """A GPU DaemonSet takes devices on every node it lands on: only where the admin chose to allow that.

    The namespace is where the object is stored; offline, one without ``metadata.namespace`` is judged
    as ``default`` (where kubectl would put it without ``-n``).
    """
    namespace = view.namespace or "default"
    if any(fnmatchcase(namespace, pattern) for pattern in settings.daemon_set_namespaces):
        return
    allowed = ", ".join(settings.daemon_set_namespaces) or "none"
    yield Finding(("spec",), f"a {view.kind.kind} asking for accelerators holds them on every node it lands on, "
                  f"and namespace {namespace} is not one where that is allowed (allowed: {allowed})",
                  "run it as a Deployment or Job sized to what it needs, or ask the platform team to add the "
                  "namespace to gpu-request-shape's daemonSetNamespaces")


def _per_node_total(view: WorkloadView, settings: Settings) -> Iterator[Finding]:
    """A DaemonSet holds its pod's accelerators on every node it can land on: count those nodes."""
    total, nodes, unbounded = 0, 0, False
    for template in view.gpu_templates:
        selector, terms = template.node_selection()
        tolerations = template.spec.get("tolerations")
        asks = {r: n for r, n in template.effective_gpus.items() if "/" in r}
        landing = [g for g in view.inventory.eligible(asks)
                   if all((g.amount(r) is None or g.amount(r) >= n) for r, n in asks.items())  # the pod fits
                   and g.matches(selector, terms)
                   and not g.untolerated(tolerations if isinstance(tolerations, list) else [])]
        unbounded |= any(g.count is None for g in landing)
        count = sum(g.count or 0 for g in landing)
        nodes += count
        total += template.gpus_per_pod * count
    limit = settings.max_gpus_per_workload
    if limit is None:
        return
    if unbounded:
        yield Finding(("spec",), f"one pod on every node it can land on, {view.gpu_templates[0].gpus_per_pod} "
                      "accelerator(s) each, and a pool without a maximum among those nodes: it can take every "
                      "GPU the pool adds", "select fewer nodes (nodeSelector), or give the pool a maxCount",
                      advisory=True)
    elif total > limit:
        yield Finding(("spec",), f"one pod on each of the {nodes} nodes it can land on asks for {total} "
                      f"accelerators in all, over the limit of {limit} per workload",
                      "select fewer nodes (nodeSelector), or fewer accelerators per pod")


POLICY = ValidatingPolicy(
    id="gpu-request-shape",
    title="GPU requests a scheduler can satisfy",
    settings_model=Settings,
    run=validate,
    description="Whole units, requests equal to limits (caught on CRDs too, where the apiserver does not check), at "
    "most the largest eligible node's devices per pod with a node inventory, else the profile's `maxPerNode` "
    "(NVIDIA 8, Neuron 16, TPU 8; native sidecars and DRA claims counted as the kubelet does) and a total per "
    "workload (64; a DaemonSet counts one pod per node it can land on), optionally node CPU/memory; GPU "
    "DaemonSets only in the namespaces `daemonSetNamespaces` lists; warns about DRA claims it cannot "
    "resolve.",
    rationale="A request no node can satisfy pends forever; a bad template in a PyTorchJob fails pod by pod "
    "while the pods that did start hold GPUs idle.",
    cpu_scope=accelerator_objects_only,
)
