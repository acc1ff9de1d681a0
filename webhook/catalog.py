"""What each policy is, for people: the data behind ``gpuguard policies``/``explain`` and report rules.

Shared by the ``policies``/``explain`` commands (``webhook/cli/explain.py``) and the audit
formats, so it sits below both rather than inside the audit.

Read from ``policies.REGISTRY`` and each policy's pydantic settings model, so the docs users
see can never drift from what the engine runs.  SARIF rules, JUnit test names and the HTML
report use the same catalog.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import orjson
from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from gpuguard.policies import REGISTRY, Policy
from gpuguard.webhook.decision import NOT_FULLY_CHECKED, NOT_FULLY_CHECKED_TITLE
from gpuguard.webhook.engine import prechecks
from gpuguard.workloads.kinds import KINDS, KindSpec

_ACTION_HELP = ("enforce: deny (validating) or apply (mutating); warn: allow with a kubectl warning; "
                "audit: allow, record only; off: skip")
_SCALAR_NAMES = {str: "string", int: "integer", bool: "boolean", float: "number", type(None): "null"}
_CONTAINER_NAMES = {list: "list", tuple: "list", set: "set", frozenset: "set", dict: "map"}


@dataclass(frozen=True)
class SettingInfo:
    """One config key of a policy: as written in the config file (camelCase)."""

    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class PolicyInfo:
    id: str
    title: str
    phase: str  # mutating | validating
    default_action: str
    description: str
    rationale: str
    example: str
    settings: tuple[SettingInfo, ...]
    configurable: bool = True  # False for the engine's own check: no config key reaches it

    @property
    def one_line(self) -> str:
        return self.title or self.description.split(". ")[0]


class UnknownPolicyError(LookupError):
    """A policy id that is not in the registry; ``suggestions`` holds close matches."""

    def __init__(self, policy_id: str, suggestions: list[str]):
        self.policy_id = policy_id
        self.suggestions = suggestions
        hint = f"; did you mean {' or '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown policy {policy_id!r}{hint} (`gpuguard policies` lists them)")


def type_name(annotation: Any) -> str:
    """A settings type as a config author reads it: ``map[string, list[Toleration]]``, ``"a" | "b"``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(orjson.dumps(a).decode() for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = _CONTAINER_NAMES.get(origin, getattr(origin, "__name__", str(origin)))
        inner = [type_name(a) for a in args if a is not Ellipsis]
        return f"{name}[{', '.join(inner)}]" if inner else name
    if annotation in _SCALAR_NAMES:
        return _SCALAR_NAMES[annotation]
    if annotation in _CONTAINER_NAMES:
        return _CONTAINER_NAMES[annotation]
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field: Any) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "(required)"
    value = field.get_default(call_default_factory=True)
    try:
        adapter = TypeAdapter(field.annotation)
        plain = adapter.dump_python(value, mode="json", by_alias=True, exclude_none=True)
    except Exception:  # an annotation pydantic can't adapt alone: show the Python value
        return repr(value)
    return orjson.dumps(plain).decode()


def settings_of(model: type[BaseModel] | None) -> tuple[SettingInfo, ...]:
    """Every field of a policy's settings model, by its config key."""
    if model is None:
        return ()
    out = []
    for name, field in model.model_fields.items():
        description = " ".join((field.description or "").split())
        if name == "action" and not description:
            description = _ACTION_HELP
        out.append(SettingInfo(field.alias or name, type_name(field.annotation), _default_text(field),
                               description))
    return tuple(out)


def _info(policy: Policy) -> PolicyInfo:
    return PolicyInfo(
        id=policy.id,
        title=policy.title,
        phase=policy.phase,
        default_action=policy.default_action,
        description=" ".join(policy.description.split()),
        rationale=" ".join(policy.rationale.split()),
        example=policy.example,
        settings=settings_of(policy.settings_model),
    )


# The engine's own check before any policy (not a policy: no action or setting turns it off).
ENGINE_CHECK = PolicyInfo(
    id=prechecks.POLICY_ID, title=prechecks.TITLE, phase="validating", default_action="enforce",
    description="Denies objects whose resource quantities (requests, limits, overhead, emptyDir sizeLimit) "
                "are not numbers Kubernetes accepts or are out of range; always on, before every policy.",
    rationale="A quantity no policy can read would be taken as missing, and an object asking for "
              "\"1e800000\" GPUs would pass as asking for none.",
    example="", settings=(), configurable=False)


# Reports on files only: what a workload names (a runtime, a DRA claim) is missing from the input.
UNRESOLVED_CHECK = PolicyInfo(
    id=NOT_FULLY_CHECKED, title=NOT_FULLY_CHECKED_TITLE, phase="validating", default_action="enforce",
    description="Reports a workload whose runtime (TrainJob, InferenceService) or DRA claim is neither in the "
                "audited input nor, with --lookup-cluster, in the cluster: its pods could not be checked.",
    rationale="The webhook refuses such an object until what it names exists; a CI audit says so as a finding "
              "that --fail-on weighs, not as gpuguard failing.",
    example="", settings=(), configurable=False)


def load_catalog(config: Any = None) -> dict[str, PolicyInfo]:
    """Every registered policy, in engine order, then the custom rules of ``config`` (a loaded Config) if given.

    Custom rules are listed so that reports name them like built-in policies (SARIF rules,
    PolicyReport categories, table rows) instead of as bare ids.
    """
    catalog = {pid: _info(policy) for pid, policy in REGISTRY.items()}
    catalog[prechecks.POLICY_ID] = ENGINE_CHECK
    catalog[NOT_FULLY_CHECKED] = UNRESOLVED_CHECK
    custom = getattr(config, "custom", None)
    for rule in getattr(custom, "rules", {}).values():
        spec = rule.policy
        checks = "; ".join(v.expression for v in spec.validations)
        catalog[rule.id] = PolicyInfo(
            id=rule.id, title=spec.title or rule.id, phase="validating", default_action=spec.action,
            description=spec.description or spec.title or f"Custom {spec.scope} rule: {checks}",
            rationale=f"Custom policy of this cluster's GpuguardConfig ({getattr(config, 'source', 'config')}); "
                      f"checks: {checks}",
            example="", settings=())
    return catalog


def find(catalog: dict[str, PolicyInfo], policy_id: str) -> PolicyInfo:
    """The policy ``policy_id``, or ``UnknownPolicyError`` with close matches (by id and title)."""
    if policy_id in catalog:
        return catalog[policy_id]
    lowered = policy_id.strip().lower().replace("_", "-").replace(" ", "-")
    if lowered in catalog:
        return catalog[lowered]
    ids = list(catalog)
    suggestions = difflib.get_close_matches(lowered, ids, n=3, cutoff=0.5)
    suggestions += [pid for pid in ids if lowered and lowered in pid and pid not in suggestions][:3]
    raise UnknownPolicyError(policy_id, suggestions[:3])


# ---------------------------------------------------------------- the fields gpuguard owns (GitOps)

# Annotations gpuguard writes on every object it changes (the engine's record, the sizing's source).
OWNED_ANNOTATIONS = ("gpuguard.io/mutated-by", "gpuguard.io/sized-from")
_JQ_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _jq(steps: Iterable[str]) -> str:
    """Path steps (``{}``: every value of a map, ``[]``: every item of a list) as a jq path expression."""
    out = ""
    for step in steps:
        if step in ("{}", "[]"):
            out += "[]?"  # optional: a kind's object without this map or list is not an error to jq
        elif _JQ_NAME.fullmatch(step):
            out += f".{step}"
        else:
            out += f'["{step}"]'
    return out or "."


def _field_steps(field: str) -> list[str]:
    """``containers[].resources`` -> ``["containers", "[]", "resources"]``."""
    steps: list[str] = []
    for part in field.split("."):
        steps += [part.removesuffix("[]"), "[]"] if part.endswith("[]") else [part]
    return steps


def owned_fields(kind: KindSpec) -> list[tuple[str, str]]:
    """(policy id, jq path) of every field gpuguard's mutating policies write on ``kind``: each pod spec's
    fields the policies declare (``MutatingPolicy.writes``), the kind's job fields from the kind table, and
    gpuguard's annotations.  What ``docs/gitops.md`` tells Argo CD to ignore (``scripts/generate.py``)."""
    found: dict[str, str] = {}
    for policy in REGISTRY.values():
        for written in getattr(policy, "writes", ()):
            if written.startswith("job."):
                value = getattr(kind.job, written.removeprefix("job."), None) if kind.job else None
                paths = (value or ()) if written == "job.ttl_variants" else ((value,) if value else ())
                for path in paths:
                    found.setdefault(_jq(str(s) for s in path), policy.id)
            else:
                for spec in kind.pod_spec_paths:
                    found.setdefault(_jq([*(str(s) for s in spec), *_field_steps(written)]), policy.id)
    for annotation in OWNED_ANNOTATIONS:
        found.setdefault(_jq(("metadata", "annotations", annotation)), "gpuguard")
    return [(policy, path) for path, policy in found.items()]


def argocd_ignore_differences() -> list[dict[str, Any]]:
    """An Argo CD Application's ``ignoreDifferences``: per workload kind, the fields gpuguard owns."""
    return [{"group": kind.group, "kind": kind.kind, "jqPathExpressions": [path for _, path in owned_fields(kind)]}
            for kind in KINDS]
