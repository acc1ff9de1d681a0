"""The GpuguardConfig file: loaded once, validated fully, and compiled for the hot path.

Everything a request needs is worked out here, at load time: each policy's settings for the
base config and for every namespace profile (deep-merged, then validated), the GPU
resource matcher, and the exemption sets.  The engine then only picks a compiled
``PolicySet`` per request.  A bad file is refused with ``file:line: reason`` so an admin
can fix a ConfigMap without guessing.
"""

from __future__ import annotations

import importlib.resources
import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from gpuguard.policies import REGISTRY, MutatingPolicy, PolicySettings, ValidatingPolicy
from gpuguard.policies.base import ConfigModel
from gpuguard.webhook.config import legacy
from gpuguard.webhook.custom.compile import CompiledRule, CustomPolicyError, CustomRules, compile_rules
from gpuguard.webhook.custom.model import CustomPolicy
from gpuguard.workloads import knative
from gpuguard.workloads.accelerators import AcceleratorError, Accelerators, ProfileSpec, merge_specs
from gpuguard.workloads.controllers import DEFAULT_TRUSTED_CONTROLLERS, TrustedControllers, parse_group_kind
from gpuguard.workloads.view import WORKLOAD_CLASSES

# The shipped default, found as package data (pyproject's package-data ships it), so it is found
# wherever the package is installed (site-packages, a zip, an editable checkout).
DEFAULT_CONFIG_PATH: Traversable = importlib.resources.files("gpuguard.policies") / "default-config.yaml"
CONFIG_KIND = "GpuguardConfig"
# Largest AdmissionReview body read before answering 413: the apiserver itself refuses
# requests over 3 MiB, so a review (object + oldObject) that is larger cannot be a real one.
# The one default for the config key ``maxBodyBytes`` and ``gpuguard serve --max-body-bytes``.
DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
log = logging.getLogger("gpuguard.config")


class ConfigError(Exception):
    """A config file gpuguard refuses; the message is ``file:line: reason``."""


WorkloadClass = Literal["training", "inference", "batch-inference", "notebook", "smoke-test"]


class WorkloadClasses(ConfigModel):
    by_kind: dict[str, WorkloadClass] = Field(
        default_factory=dict, description="Kind -> workload class, overriding the built-in defaults.")
    allow_label_override: bool = Field(True, description="Let users declare the class with the label "
                                       "gpuguard.io/workload-class; the workload-class policy keeps the "
                                       "priority a declaration can reach within what the namespace allows.")


class Exemptions(ConfigModel):
    namespaces: list[str] = Field(default_factory=list, description="Namespace names or globs left untouched.")
    users: list[str] = Field(default_factory=list, description="Requesting usernames left untouched.")
    service_accounts: list[str] = Field(default_factory=list, description="namespace/name of requesting "
                                        "service accounts left untouched.")
    groups: list[str] = Field(default_factory=list, description="Requesting groups left untouched.")


class ControllerEdge(ConfigModel):
    owner: str = Field(description="GroupKind of the controlling owner, e.g. apps/ReplicaSet or Pod.")
    kind: str = Field(description="GroupKind of the object the controller creates for it, e.g. Pod.")
    mutate: bool = Field(False, description="Still mutate what it creates (only for controllers that compare "
                         "nothing gpuguard adds, e.g. the Kubeflow Trainer's JobSets).")

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
        "kubernetes.podspec-tolerations): gpuguard sets those pod fields on Knative-served templates.")


class ConfigFile(ConfigModel):
    api_version: str = "gpuguard.io/v1alpha1"
    kind: Literal["GpuguardConfig"] = CONFIG_KIND
    failure_mode: Literal["open", "closed"] = Field("open", description="Engine failure: allow with a "
                                                    "warning (open) or deny (closed).")
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    accelerators: list[dict[str, Any]] = Field(
        default_factory=list, description="Accelerator profiles, merged by name into the shipped ones "
        "(docs/accelerators.md).")
    workload_classes: WorkloadClasses = Field(default_factory=WorkloadClasses)
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
    # Admins' own CEL rules (webhook/custom/, docs/custom-policies.md).
    custom_policies: list[CustomPolicy] = Field(default_factory=list)


def compile_controllers(overrides: dict[str, TrustedController]) -> TrustedControllers:
    """The built-in trusted controllers with the config's entries laid over them by name."""
    entries = {name: TrustedController.model_validate(body) for name, body in DEFAULT_TRUSTED_CONTROLLERS.items()}
    entries.update(overrides)
    return TrustedControllers({
        name: (entry.usernames(),
               [(parse_group_kind(e.owner), parse_group_kind(e.kind), e.mutate) for e in entry.creates])
        for name, entry in entries.items()
    })


@dataclass(frozen=True)
class PolicySet:
    """The enabled policies with their validated settings, split by phase, in registry order."""

    mutating: tuple[tuple[MutatingPolicy, PolicySettings], ...]
    validating: tuple[tuple[ValidatingPolicy, PolicySettings], ...]
    custom: tuple[tuple[CompiledRule, str], ...] = ()  # enabled custom rules with their action

    def settings(self, policy_id: str) -> PolicySettings | None:
        for policy, settings in self.mutating + self.validating:
            if policy.id == policy_id:
                return settings
        return None


@dataclass(frozen=True)
class CompiledProfile:
    name: str
    match: ProfileMatch
    policies: PolicySet

    def matches(self, namespace: str | None, labels: dict[str, str]) -> bool:
        by_name = namespace is not None and any(fnmatchcase(namespace, p) for p in self.match.namespaces)
        by_labels = bool(self.match.namespace_labels) and all(
            labels.get(k) == v for k, v in self.match.namespace_labels.items())
        return by_name or by_labels


class Config:
    """A loaded, validated and compiled GpuguardConfig."""

    def __init__(self, raw: ConfigFile, policies: PolicySet, profiles: list[CompiledProfile], source: str,
                 accelerators: Accelerators, custom: CustomRules | None = None):
        self.raw = raw
        self.custom = custom or CustomRules([])  # every compiled custom rule, for catalogs and docs
        self.source = source
        self.policies = policies
        self.profiles = profiles
        self.failure_mode = raw.failure_mode
        self.max_body_bytes = raw.max_body_bytes
        self.cost = raw.cost
        self.workload_classes = raw.workload_classes
        self.trust_controller_pods = raw.trust_controller_pods
        self.accelerators = accelerators
        self._exempt_users = frozenset(raw.exemptions.users) | frozenset(
            "system:serviceaccount:" + sa.replace("/", ":", 1) for sa in raw.exemptions.service_accounts)
        self._exempt_groups = frozenset(raw.exemptions.groups)
        self._exempt_namespaces = tuple(raw.exemptions.namespaces)
        self.controllers = compile_controllers(raw.trusted_controllers)
        self.knative_default = raw.kserve.default_deployment_mode in ("Serverless", "Knative")
        self.knative_gated = knative.gated(frozenset(raw.kserve.knative_features))
        self.is_gpu_resource = self.accelerators.is_accelerator

    def exemption(self, namespace: str | None, username: str, groups: tuple[str, ...]) -> str | None:
        """Why a request is exempt, or ``None``.  Only admin-controlled facts count: never annotations."""
        if namespace and any(fnmatchcase(namespace, p) for p in self._exempt_namespaces):
            return f"namespace {namespace} is exempt"
        if username in self._exempt_users:
            return f"user {username} is exempt"
        for group in groups:
            if group in self._exempt_groups:
                return f"group {group} is exempt"
        return None

    def policies_for(self, namespace: str | None, labels: dict[str, str]) -> tuple[str | None, PolicySet]:
        """The profile name (or ``None``) and policy set in force for a namespace."""
        for profile in self.profiles:
            if profile.matches(namespace, labels):
                return profile.name, profile.policies
        return None, self.policies


# ---------------------------------------------------------------- loading with line numbers

def _line_index(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Map each key path of a YAML document to its 1-based line, to point errors at the right line."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[path + (key,)] = key_node.start_mark.line + 1
            _line_index(value_node, path + (key,), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, path + (i,), out)
    return out


def _line_for(lines: dict[tuple, int], loc: tuple) -> int:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _errors(exc: ValidationError, prefix: tuple, lines: dict[tuple, int], source: str) -> ConfigError:
    problems = []
    for err in exc.errors():
        loc = prefix + tuple(err["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(f"{source}:{_line_for(lines, loc)}: {where}: {message}")
    return ConfigError("\n".join(problems))


def _deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _compile_policies(overrides: dict[str, dict[str, Any]], prefix: tuple, lines: dict, source: str,
                      custom: CustomRules) -> PolicySet:
    mutating: list[tuple[MutatingPolicy, PolicySettings]] = []
    validating: list[tuple[ValidatingPolicy, PolicySettings]] = []
    for policy_id, values in overrides.items():
        if policy_id not in REGISTRY and policy_id not in custom:
            known = ", ".join([*REGISTRY, *custom.rules])
            raise ConfigError(f"{source}:{_line_for(lines, prefix + (policy_id,))}: unknown policy "
                              f"{policy_id!r} (known: {known})")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}:{_line_for(lines, prefix + (policy_id,))}: policy {policy_id!r} "
                              "must be a mapping of settings")
    for policy_id, policy in REGISTRY.items():
        try:
            settings = policy.settings_model.model_validate(overrides.get(policy_id, {}))
        except ValidationError as exc:
            raise _errors(exc, prefix + (policy_id,), lines, source) from None
        if settings.action != "off":
            if isinstance(policy, MutatingPolicy):
                mutating.append((policy, settings))
            elif isinstance(policy, ValidatingPolicy):
                validating.append((policy, settings))
    try:
        enabled_custom = custom.resolve(overrides, prefix, lambda loc: f"{source}:{_line_for(lines, loc)}")
    except CustomPolicyError as exc:
        raise ConfigError(str(exc)) from None
    return PolicySet(tuple(mutating), tuple(validating), enabled_custom)


def build_config(data: Any, source: str = "<config>", lines: dict[tuple, int] | None = None) -> Config:
    """Validate and compile a parsed config document."""
    lines = lines or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the config must be a mapping with kind: {CONFIG_KIND}")
    try:
        data, notes = legacy.migrate(data)
    except legacy.LegacyKeyError as exc:
        raise ConfigError(f"{source}:{_line_for(lines, exc.loc)}: {'.'.join(map(str, exc.loc))}: {exc}") from None
    for loc, note in notes:
        log.warning("%s:%s: %s: %s", source, _line_for(lines, loc), ".".join(map(str, loc)), note)
    try:
        raw = ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise _errors(exc, (), lines, source) from None
    accelerators = _compile_accelerators(data.get("accelerators"), source, lines)
    for kind, cls in raw.workload_classes.by_kind.items():
        if cls not in WORKLOAD_CLASSES:  # pragma: no cover - Literal already guards this
            raise ConfigError(f"{source}: workloadClasses.byKind.{kind}: unknown class {cls}")
    try:
        custom = compile_rules(raw.custom_policies, set(REGISTRY), lambda loc: f"{source}:{_line_for(lines, loc)}")
    except CustomPolicyError as exc:
        raise ConfigError(str(exc)) from None
    base = _compile_policies(raw.policies, ("policies",), lines, source, custom)
    profiles = []
    for i, profile in enumerate(raw.profiles):
        merged = {pid: _deep_merge(raw.policies.get(pid, {}), values) if isinstance(values, dict) else values
                  for pid, values in profile.policies.items()}
        merged = {**raw.policies, **merged}
        profiles.append(CompiledProfile(profile.name, profile.match,
                                        _compile_policies(merged, ("profiles", i, "policies"), lines, source, custom)))
    return Config(raw, base, profiles, source, accelerators, custom)


@lru_cache(maxsize=1)
def shipped_accelerators() -> tuple[dict[str, Any], ...]:
    """The ``accelerators`` list of the shipped default config: the profiles every config starts from."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    return tuple(data.get("accelerators") or ())


def _compile_accelerators(entries: Any, source: str, lines: dict[tuple, int]) -> Accelerators:
    """Merge the config's profiles into the shipped ones, validate each, and compile the lookup."""
    user = entries if isinstance(entries, list) else []
    user_index = {e.get("name"): i for i, e in enumerate(user) if isinstance(e, dict)}
    shipped = list(shipped_accelerators())
    if source == str(DEFAULT_CONFIG_PATH):
        shipped = []  # the default file *is* the shipped list
    specs = []
    for entry in merge_specs(shipped, user):
        name = entry.get("name") if isinstance(entry, dict) else None
        prefix: tuple = ("accelerators", user_index[name]) if name in user_index else ("accelerators",)
        try:
            specs.append(ProfileSpec.model_validate(entry))
        except ValidationError as exc:
            raise _errors(exc, prefix, lines, source) from None
    names = [s.name for s in specs]
    for name in {n for n in names if names.count(n) > 1}:
        raise ConfigError(f"{source}:{_line_for(lines, ('accelerators',))}: accelerators: the profile name "
                          f"{name!r} is used twice")
    try:
        return Accelerators(specs)
    except AcceleratorError as exc:
        loc = ("accelerators", user_index[exc.name]) if exc.name in user_index else ("accelerators",)
        raise ConfigError(f"{source}:{_line_for(lines, loc)}: accelerators[{exc.name}]: {exc}") from None


# A YAML alias re-uses a node; expanding aliases of aliases grows exponentially ("billion
# laughs": 440 bytes took a live server to 2 GB).  The composed node graph is small, so its
# expanded size is counted there, before anything is constructed.  Real configs expand to a
# few thousand nodes.
MAX_EXPANDED_NODES = 100_000
MAX_NESTING = 64


def load_config(path: str | Path | None = None) -> Config:
    """Load a GpuguardConfig file (``None``: the shipped default) or raise ``ConfigError``."""
    file: Path | Traversable = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    source = str(file)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read config: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{source}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save the config as UTF-8") from None
    return parse_config_text(text, source)


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse documents whose aliases expand beyond ``MAX_EXPANDED_NODES`` or that nest too deeply.

    Iterative, with each distinct node's expanded size computed once, so checking a bomb costs
    as little as composing it.  A node that contains itself (a recursive alias) is refused too.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_EXPANDED_NODES:
                raise ConfigError(f"{source}:{node.start_mark.line + 1}: YAML aliases expand this document "
                                  f"beyond {MAX_EXPANDED_NODES} nodes; write the values out instead")
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(f"{source}:{node.start_mark.line + 1}: a YAML alias refers to a node that "
                              "contains it (recursive alias)")
        if depth > MAX_NESTING:
            raise ConfigError(f"{source}:{node.start_mark.line + 1}: nested deeper than {MAX_NESTING} levels")
        on_path.add(key)
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _compose_and_construct(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """Compose once, bound the expansion, then construct from the same node graph (no second parse)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_expansion(node, source)
        return node, loader.construct_document(node)
    finally:
        loader.dispose()


def parse_config_text(text: str, source: str = "<config>") -> Config:
    """Parse and compile config YAML text (used for files, ConfigMaps and tests)."""
    try:
        node, data = _compose_and_construct(text, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ConfigError(f"{source}:{line}: invalid YAML: {exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid YAML: nested too deeply") from None
    if node is None:
        raise ConfigError(f"{source}:1: the config file is empty")
    return build_config(data, source, _line_index(node))
