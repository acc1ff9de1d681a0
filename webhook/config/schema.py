"""The GpuguardConfig file as written: pydantic models of its YAML keys, with their defaults.

These models only say what a valid file looks like; turning one into what a request needs
(merged profiles, per-policy settings, matchers) is ``compile``'s job.
"""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable
from typing import Any, Final, Literal

from pydantic import Field, field_validator

from gpuguard.policies.base import ConfigModel
from gpuguard.webhook.custom.model import CustomPolicy
from gpuguard.workloads import quantity
from gpuguard.workloads.controllers import parse_group_kind

# The shipped default, found as package data (pyproject's package-data ships it), so it is found
# wherever the package is installed (site-packages, a zip, an editable checkout).
DEFAULT_CONFIG_PATH: Traversable = importlib.resources.files("gpuguard.policies") / "default-config.yaml"
CONFIG_KIND: Final = "GpuguardConfig"
# Largest AdmissionReview body read before answering 413: the apiserver itself refuses
# requests over 3 MiB, so a review (object + oldObject) that is larger cannot be a real one.
# The one default for the config key ``maxBodyBytes`` and ``gpuguard serve --max-body-bytes``.
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
# How long the webhook takes over one review before answering it as not judged: below the
# 10 s timeoutSeconds the shipped webhook configurations give the apiserver, so the answer
# (and its reason) arrives rather than the apiserver's own timeout.
DEFAULT_REVIEW_DEADLINE_SECONDS = 8.0

WorkloadClass = Literal["training", "inference", "batch-inference", "notebook", "smoke-test"]


class WorkloadClasses(ConfigModel):
    by_kind: dict[str, WorkloadClass] = Field(
        default_factory=dict, description="Kind -> workload class, overriding the built-in defaults.")
    allow_label_override: bool = Field(True, description="Let users declare the class with the label "
                                       "gpuguard.io/workload-class; the workload-class policy keeps the "
                                       "priority a declaration can reach within what the namespace allows.")


class KindTemplate(ConfigModel):
    path: str = Field(min_length=1, description="Dotted path from the object's root to a pod template "
                      "({metadata, spec}) or a bare PodSpec, e.g. spec.worker.template; list items by index.")
    replicas: str | None = Field(None, description="Dotted path to how many pods it makes (unset: 1, and "
                                 "messages say the count is not known).")


class CustomKind(ConfigModel):
    """A workload kind added by configuration: the webhook, the scan and every shell judge it like a built-in."""

    group: str = Field(min_length=1, description="API group, e.g. ml.example.com.")
    versions: list[str] = Field(min_length=1, description="Served versions the webhook intercepts.")
    kind: str = Field(min_length=1, description="Kind, e.g. FineTune.")
    plural: str = Field(min_length=1, description="Resource (plural), e.g. finetunes.")
    workload_class: WorkloadClass = Field("training", description="What the kind is for: training (runs to "
                                          "completion), inference (a long-running service) or notebook (interactive); "
                                          "batch-inference and smoke-test also run to completion.")
    templates: list[KindTemplate] = Field(default_factory=list, description="Where its pod templates are; empty: "
                                          "found by structure (any containers list with images, wherever it sits).")
    deadline: str | None = Field(None, description="Dotted path to its activeDeadlineSeconds, if it has one.")
    ttl: str | None = Field(None, description="Dotted path to its ttlSecondsAfterFinished, if it has one.")
    backoff: str | None = Field(None, description="Dotted path to its retry limit, if it has one.")
    gang: bool = Field(False, description="Its pods run as one distributed job (all-or-nothing scheduling).")
    scale_replicas: str | None = Field(None, description="Where its scale subresource's replicas land.")


class Exemptions(ConfigModel):
    namespaces: list[str] = Field(default_factory=list, description="Namespace names or globs left untouched.")
    users: list[str] = Field(default_factory=list, description="Requesting usernames left untouched.")
    service_accounts: list[str] = Field(default_factory=list, description="namespace/name of requesting "
                                        "service accounts left untouched.")
    groups: list[str] = Field(default_factory=list, description="Requesting groups left untouched.")


class ControllerEdge(ConfigModel):
    owner: str = Field(description="GroupKind of the controlling owner, e.g. apps/ReplicaSet or Pod.")
    kind: str = Field(description="GroupKind of the object the controller creates for it, e.g. Pod.")
    mutate: bool = Field(False, description="What it creates is derived from a template held outside the owner "
                         "(the Kubeflow Trainer's JobSets, built from a runtime): mutated and judged in full "
                         "when the controller creates it (only for controllers that compare nothing gpuguard adds).")

    @field_validator("owner", "kind")
    @classmethod
    def _group_kind(cls, value: str) -> str:
        group, kind = parse_group_kind(value)
        if not kind or not kind[0].isupper() or " " in value:
            raise ValueError(f"{value!r} is not a GroupKind such as Pod, apps/ReplicaSet or batch/Job")
        return value


class TrustedController(ConfigModel):
    users: list[str] = Field(default_factory=list, description="Usernames the controller sends requests as.")
    service_accounts: list[str] = Field(default_factory=list, description="namespace/name of its service "
                                        "accounts (the same as users system:serviceaccount:NS:NAME).")
    creates: list[ControllerEdge] = Field(default_factory=list, description="Which kinds it creates for "
                                          "which owner kinds.")

    def usernames(self) -> list[str]:
        return [*self.users, *("system:serviceaccount:" + sa.replace("/", ":", 1) for sa in self.service_accounts)]


class ProfileMatch(ConfigModel):
    namespaces: list[str] = Field(default_factory=list, description="Namespace names or globs.")
    namespace_labels: dict[str, str] = Field(default_factory=dict, description="Labels the namespace must have.")


class Profile(ConfigModel):
    name: str
    match: ProfileMatch
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)


class Cost(ConfigModel):
    """Prices for ``gpuguard audit`` cost estimates: the one price table (docs/audit.md shows it).

    Seed figures are public on-demand list prices (A100 about $3-5, H100 about $8-10 per
    GPU-hour); the shipped config leaves ``cost`` out so these apply until an admin sets theirs.
    """

    gpu_hourly_usd: dict[str, float] = Field(
        default_factory=lambda: {"nvidia.com/gpu": 4.0, "nvidia.com/gpu.shared": 1.0, "nvidia.com/mig-*": 1.0,
                                 "amd.com/gpu": 3.0, "habana.ai/gaudi": 3.0, "aws.amazon.com/neuron*": 1.5,
                                 "google.com/tpu": 4.0},
        description="GPU resource (or glob) -> USD per GPU-hour, for audit cost estimates.")
    product_hourly_usd: dict[str, float] = Field(
        default_factory=lambda: {"*H100*": 9.0, "*A100*": 4.0, "*A100*40GB*": 3.0, "NVIDIA-L4": 0.8},
        description="GPU product node-label value (or glob, case-insensitive; the longest match wins) -> USD "
        "per GPU-hour; used when a workload pins a product.")


class KServe(ConfigModel):
    default_deployment_mode: Literal["Serverless", "Knative", "RawDeployment", "Standard"] = Field(
        "Serverless", description="The cluster's KServe default deployment mode (inferenceservice-config); applies "
        "to InferenceServices without the serving.kserve.io/deploymentMode annotation.")
    knative_features: list[str] = Field(
        default_factory=list, description="Knative config-features enabled on the cluster (e.g. "
        "kubernetes.podspec-tolerations): gpuguard sets those pod fields on Knative-served templates (KServe's "
        "Serverless mode and Knative Services).")


class KubeAI(ConfigModel):
    resource_profiles: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict, description="KubeAI's resource profiles as in its config (the Helm values' "
        "resourceProfiles: requests, limits, nodeSelector, affinity, tolerations per profile), merged over the "
        "KubeAI chart's defaults as Helm merges values (null removes one). A Model is judged as the pods its "
        "<profile>:<count> makes; a profile in neither is refused as not judgeable.")


class NodePool(ConfigModel):
    """A pool of nodes an autoscaler adds when needed: its shape, so pods are judged before its first node exists."""

    name: str = Field(min_length=1, description="The pool's name (shown in messages and mutation records).")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels its nodes carry.")
    taints: list[dict[str, str]] = Field(default_factory=list, description="Taints its nodes carry "
                                         "(key, value, effect).")
    allocatable: dict[str, str] = Field(default_factory=dict, description="One node's allocatable: cpu, memory, "
                                        "ephemeral-storage and each accelerator resource.")
    max_count: int | None = Field(None, ge=0, description="The most nodes the pool grows to (none: unbounded).")

    @field_validator("allocatable")
    @classmethod
    def _quantities(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [f"{k}: {v!r}" for k, v in value.items() if quantity.parse(v) is None]
        if bad:
            raise ValueError(f"not Kubernetes quantities: {', '.join(bad)}")
        return value

    @field_validator("taints")
    @classmethod
    def _taints(cls, value: list[dict[str, str]]) -> list[dict[str, str]]:
        for taint in value:
            if not taint.get("key") or taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise ValueError(f"a taint needs a key and an effect (NoSchedule, PreferNoSchedule, NoExecute): "
                                 f"{taint}")
        return value


class Inventory(ConfigModel):
    """What gpuguard knows of the cluster's nodes beyond the Nodes it sees (docs/inventory.md)."""

    node_pools: list[NodePool] = Field(default_factory=list, description="Autoscaled pools, with or without "
                                       "nodes now.")
    learn_accelerators: bool = Field(True, description="Count as an accelerator an extended resource the nodes "
                                     "advertise that no profile names (a vendor-domain name, not a NIC, FUSE ... "
                                     "device), with a generic profile (docs/accelerators.md).")
    not_accelerators: list[str] = Field(default_factory=list, description="Extended resource names or globs "
                                        "(and DeviceClass names) never learned as accelerators, beside the shipped "
                                        "list of NICs, host devices and offload engines.")


class ConfigFile(ConfigModel):
    api_version: str = "gpuguard.io/v1alpha1"
    kind: Literal["GpuguardConfig"] = CONFIG_KIND
    failure_mode: Literal["open", "closed"] = Field(
        "closed", description="What can't be judged (engine error, unreadable DRA claim, runtime or scaled "
        "workload): deny saying why (closed) or allow with a warning (open).")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    review_deadline_seconds: float = Field(
        DEFAULT_REVIEW_DEADLINE_SECONDS, gt=0, le=30, description="A review not answered within this many "
        "seconds is answered as not judged (per failureMode); keep it below the webhook's timeoutSeconds.")
    accelerators: list[dict[str, Any]] = Field(
        default_factory=list, description="Accelerator profiles, merged by name into the shipped ones "
        "(docs/accelerators.md).")
    workload_classes: WorkloadClasses = Field(default_factory=WorkloadClasses)
    kinds: list[CustomKind] = Field(default_factory=list, description="Workload kinds added by configuration "
                                    "(docs/admin.md#adding-a-kind).")
    exemptions: Exemptions = Field(default_factory=Exemptions)
    trust_controller_pods: bool = Field(True, description="Do not validate again what a trusted controller "
                                        "creates from a template gpuguard checked (it is never mutated).")
    trusted_controllers: dict[str, TrustedController] = Field(
        default_factory=dict, description="Controllers by name, merged over the built-in table "
        "(workloads/controllers.py): an entry replaces the built-in one of the same name; users: [] disables it.")
    policies: dict[str, dict[str, Any]] = Field(default_factory=dict)
    profiles: list[Profile] = Field(default_factory=list)
    cost: Cost = Field(default_factory=Cost)
    kserve: KServe = Field(default_factory=KServe)
    kubeai: KubeAI = Field(default_factory=KubeAI)
    inventory: Inventory = Field(default_factory=Inventory)
    # Admins' own CEL rules (webhook/custom/, docs/custom-policies.md).
    custom_policies: list[CustomPolicy] = Field(default_factory=list)
