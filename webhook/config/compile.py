"""A validated config file compiled for the hot path.

Everything a request needs is worked out here, at load time: each policy's settings for the
base config and for every namespace profile (deep-merged, then validated), the GPU
resource matcher, and the exemption sets.  The engine then only picks a compiled
``PolicySet`` per request.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property, lru_cache
from typing import Any

import yaml
from pydantic import ValidationError

from gpuguard.policies import REGISTRY, MutatingPolicy, PolicySettings, ValidatingPolicy
from gpuguard.policies.base import CpuScope
from gpuguard.webhook.config import legacy
from gpuguard.webhook.config.errors import ConfigError
from gpuguard.webhook.config.schema import (
    CONFIG_KIND,
    DEFAULT_CONFIG_PATH,
    ConfigFile,
    ProfileMatch,
    TrustedController,
)
from gpuguard.webhook.config.yaml_lines import SAFE_LOADER, line_for, validation_error
from gpuguard.webhook.custom.compile import CompiledRule, CustomPolicyError, CustomRules, compile_rules
from gpuguard.workloads import kinds
from gpuguard.workloads.accelerators import AcceleratorError, Accelerators, ProfileSpec, merge_specs
from gpuguard.workloads.controllers import DEFAULT_TRUSTED_CONTROLLERS, TrustedControllers, parse_group_kind
from gpuguard.workloads.inventory import Inventory, declared_pool
from gpuguard.workloads.kinds import KindSpec
from gpuguard.workloads.kinds.configured import KindDeclaration, configured_kind
from gpuguard.workloads.kinds.knative import features as knative
from gpuguard.workloads.kinds.kubeai import merged_profiles
from gpuguard.workloads.prices import Prices
from gpuguard.workloads.view import WORKLOAD_CLASSES

log = logging.getLogger("gpuguard.config")


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

    @cached_property
    def cpu_scope(self) -> CpuScope:
        """The objects without accelerators these policies may act on, as each says itself (``Policy.cpu_scope``;
        one that says nothing is assumed to need them all).  Custom rules are not counted here."""
        classes: set[str] = set()
        for policy, settings in (*self.mutating, *self.validating):
            scope = policy.cpu_scope(settings)
            if scope.everything:
                return CpuScope(everything=True, reason=f"{policy.id} {scope.reason}")
            classes.update(scope.priority_classes)
        return CpuScope(priority_classes=frozenset(classes))


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
                 accelerators: Accelerators, custom: CustomRules | None = None, kinds: tuple[KindSpec, ...] = ()):
        self.raw = raw
        self.kinds = kinds  # the config's own workload kinds (``kinds:``), laid after the built-in table
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
        accelerators.kubeai_profiles = merged_profiles(raw.kubeai.resource_profiles)
        accelerators.prices = Prices(dict(raw.cost.gpu_hourly_usd), dict(raw.cost.product_hourly_usd))
        # Declared node pools (``inventory.nodePools``): shapes an autoscaler adds, part of every inventory.
        self.node_pools = tuple(declared_pool(p.name, p.labels, p.taints, p.allocatable, p.max_count)
                                for p in raw.inventory.node_pools)
        self.inventory = raw.inventory
        self._exempt_users = frozenset(raw.exemptions.users) | frozenset(
            "system:serviceaccount:" + sa.replace("/", ":", 1) for sa in raw.exemptions.service_accounts)
        self._exempt_groups = frozenset(raw.exemptions.groups)
        self._exempt_namespaces = tuple(raw.exemptions.namespaces)
        self.controllers = compile_controllers(raw.trusted_controllers)
        self.knative_default = raw.kserve.default_deployment_mode in ("Serverless", "Knative")
        self.knative_gated = knative.gated(frozenset(raw.kserve.knative_features))

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
            raise ConfigError(f"{source}:{line_for(lines, prefix + (policy_id,))}: unknown policy "
                              f"{policy_id!r} (known: {known})")
        if not isinstance(values, dict):
            raise ConfigError(f"{source}:{line_for(lines, prefix + (policy_id,))}: policy {policy_id!r} "
                              "must be a mapping of settings")
    for policy_id, policy in REGISTRY.items():
        try:
            settings = policy.settings_model.model_validate(overrides.get(policy_id, {}))
        except ValidationError as exc:
            raise validation_error(exc, prefix + (policy_id,), lines, source) from None
        if settings.action != "off":
            if isinstance(policy, MutatingPolicy):
                mutating.append((policy, settings))
            elif isinstance(policy, ValidatingPolicy):
                validating.append((policy, settings))
    try:
        enabled_custom = custom.resolve(overrides, prefix, lambda loc: f"{source}:{line_for(lines, loc)}")
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
        raise ConfigError(f"{source}:{line_for(lines, exc.loc)}: {'.'.join(map(str, exc.loc))}: {exc}") from None
    for loc, note in notes:
        log.warning("%s:%s: %s: %s", source, line_for(lines, loc), ".".join(map(str, loc)), note)
    try:
        raw = ConfigFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, (), lines, source) from None
    accelerators = _compile_accelerators(data.get("accelerators"), source, lines)
    for kind, cls in raw.workload_classes.by_kind.items():
        if cls not in WORKLOAD_CLASSES:  # pragma: no cover - Literal already guards this
            raise ConfigError(f"{source}: workloadClasses.byKind.{kind}: unknown class {cls}")
    try:
        custom = compile_rules(raw.custom_policies, set(REGISTRY), lambda loc: f"{source}:{line_for(lines, loc)}")
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
    own_kinds = _compile_kinds(raw, source, lines)
    kinds.configure(own_kinds)  # the loaded config's kinds join the table every shell reads
    return Config(raw, base, profiles, source, accelerators, custom, own_kinds)


def _compile_kinds(raw: ConfigFile, source: str, lines: dict[tuple, int]) -> tuple[KindSpec, ...]:
    """The config's own kinds (``kinds:``); one that a built-in kind already is, or a duplicate, is refused."""
    out: list[KindSpec] = []
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(raw.kinds):
        where = f"{source}:{line_for(lines, ('kinds', i))}: kinds[{i}]"
        if kinds.is_builtin(entry.group, entry.kind):
            raise ConfigError(f"{where}: {entry.group}/{entry.kind} is built in; remove the entry")
        if (entry.group, entry.kind) in seen:
            raise ConfigError(f"{where}: {entry.group}/{entry.kind} is listed twice")
        seen.add((entry.group, entry.kind))
        out.append(configured_kind(KindDeclaration(
            entry.group, entry.kind, entry.plural, tuple(entry.versions), entry.workload_class,
            tuple((t.path, t.replicas) for t in entry.templates), entry.deadline, entry.ttl, entry.backoff,
            entry.gang, entry.scale_replicas)))
    return tuple(out)


def with_learned_accelerators(config: Config, inventory: Inventory) -> Config:
    """``config`` with the accelerators the cluster's nodes and DeviceClasses say exist (``Accelerators.learn``).

    Always learned from the config's own profiles, so a config that already learned from other nodes is put
    right; returns ``config`` itself when that changes nothing.  A copy otherwise (a config may serve several
    engines, each with its own nodes).
    """
    settings = config.inventory
    facts = inventory.learned(settings.not_accelerators, from_nodes=settings.learn_accelerators)
    accelerators = config.accelerators.learn(facts)
    if accelerators is config.accelerators:
        return config
    learned = copy.copy(config)
    learned.accelerators = accelerators
    return learned


@lru_cache(maxsize=1)
def shipped_accelerators() -> tuple[dict[str, Any], ...]:
    """The ``accelerators`` list of the shipped default config: the profiles every config starts from."""
    data = yaml.load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"), Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
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
            raise validation_error(exc, prefix, lines, source) from None
    names = [s.name for s in specs]
    for name in {n for n in names if names.count(n) > 1}:
        raise ConfigError(f"{source}:{line_for(lines, ('accelerators',))}: accelerators: the profile name "
                          f"{name!r} is used twice")
    try:
        return Accelerators(specs)
    except AcceleratorError as exc:
        loc = ("accelerators", user_index[exc.name]) if exc.name in user_index else ("accelerators",)
        raise ConfigError(f"{source}:{line_for(lines, loc)}: accelerators[{exc.name}]: {exc}") from None
