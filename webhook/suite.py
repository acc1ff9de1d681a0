"""Policy fixture suites: find the cases of a folder tree, run each through the engine, say what differs.

The format is ``docs/policy-fixtures.md``; the project's own ``tests/policies/`` and the
suites admins run with ``gpuguard test`` are both read by this module, so a fixture means the
same thing to both.  It is a library: ``discover`` finds cases, ``run_case`` runs one and
returns a ``CaseResult`` whose ``mismatches`` are sentences a reader can act on.  Nothing
here prints or exits; the caller (pytest, the CLI) decides how to show results.

A case is evaluated as ``gpuguard evaluate`` evaluates an object (mutating policies, then
validating policies on the mutated object) and then checked four ways: the decision
(allowed, findings, mutatedBy), the mutated object, the JSON patch applied with the
``jsonpatch`` library, and a second evaluation of the mutated object (mutations must be
idempotent, so it must give an empty patch).

Where a suite ends: the folders between a case and the path given to ``discover``, or, when
a folder above that path holds a ``suite.yaml``, up to the highest such folder (below the
repository root), so pointing at one case of a suite still runs it with its suite's settings.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import jsonpatch
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gpuguard.webhook.config import Config, ConfigError, PolicySet, load_config
from gpuguard.webhook.decision import Decision, RequestContext, Violation, unresolved_as_finding
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.engine.patch import make_patch
from gpuguard.webhook.manifests import TOO_LARGE, UNREADABLE, ManifestError, load, parse_values, read_text
from gpuguard.webhook.objects import StaticLookup
from gpuguard.workloads import inventory
from gpuguard.workloads.claims import StaticClaims
from gpuguard.workloads.inventory import Inventory

INPUT = "input.yaml"
EXPECT = "expect.yaml"
MUTATED = "mutated.yaml"
OLD = "old.yaml"
OBJECTS = "objects.yaml"  # other objects the input names (a TrainJob's runtime), several documents
NODES = "nodes.yaml"  # the cluster's Node (and Karpenter NodePool) objects the case is decided with
CONFIG = "config.yaml"
SUITE = "suite.yaml"


class SuiteError(Exception):
    """A path given to ``discover`` that does not exist or holds no case."""


# ---------------------------------------------------------------- the files' schemas

class _Model(BaseModel):
    """camelCase keys as in the rest of gpuguard's YAML; unknown keys are mistakes, so refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class Request(_Model):
    """The admission request a case is evaluated under (every field optional; defaults as documented)."""

    operation: Literal["CREATE", "UPDATE"] | None = None
    namespace: str | None = None
    namespace_labels: dict[str, str] | None = None
    username: str | None = None
    groups: list[str] | None = None

    def over(self, base: Request) -> Request:
        """This request's fields where set, ``base``'s elsewhere (a case refines its suite's request)."""
        return base.model_copy(update={k: v for k, v in self if v is not None})


class SuiteDefaults(_Model):
    only: list[str] | None = None
    request: Request = Field(default_factory=Request)


class ExpectedFinding(_Model):
    policy: str
    action: Literal["deny", "warn", "audit"]
    path: str | None = None
    message_contains: str | None = None

    def matches(self, violation: Violation) -> bool:
        return (violation.policy == self.policy and violation.verdict == self.action
                and (self.path is None or violation.path == self.path)
                and (self.message_contains is None or self.message_contains in violation.message
                     or self.message_contains in violation.fix))

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path is not None else ""
        about = f" saying {self.message_contains!r}" if self.message_contains is not None else ""
        return f"{self.action} from {self.policy}{where}{about}"


class Expectation(_Model):
    description: str = ""
    only: list[str] | None = None
    request: Request = Field(default_factory=Request)
    allowed: bool
    violations: list[ExpectedFinding] = Field(default_factory=list)
    mutated_by: list[str] = Field(default_factory=list)


# ---------------------------------------------------------------- discovery

@dataclass(frozen=True)
class Case:
    """One case folder.  ``name`` is its path below the folder it was found under (``job-ttl/too-long-ttl-capped``)."""

    name: str
    path: Path
    suite_root: Path  # the highest folder whose suite.yaml / config.yaml still apply


def _suite_root(start: Path) -> Path:
    """``start``, or its highest parent holding a ``suite.yaml`` (not looking past a repository root)."""
    root = start
    folder = start
    while folder.parent != folder and not (folder / ".git").exists():
        folder = folder.parent
        if (folder / SUITE).is_file():
            root = folder
    return root


def discover(paths: Iterable[str | os.PathLike[str]]) -> list[Case]:
    """Every case under ``paths`` (a case is a folder holding ``input.yaml``), sorted, each once.

    A path may be a suite folder, a case folder or a case's ``input.yaml``.  Case folders are
    not searched further: a case does not hold cases.  Raises ``SuiteError`` for a path that
    does not exist or holds no case, so a typo does not pass as an empty, green suite.
    """
    found: dict[Path, Case] = {}
    for given in paths:
        path = Path(given)
        if path.is_file() and path.name == INPUT:
            path = path.parent
        if not path.is_dir():
            raise SuiteError(f"{given}: no such folder (give a suite folder, a case folder or an {INPUT})")
        path = path.resolve()
        root = _suite_root(path)
        before = len(found)
        if (path / INPUT).is_file():
            found.setdefault(path, Case(path.name, path, root))
        else:
            for folder, subdirs, files in os.walk(path):
                subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
                if INPUT in files:
                    subdirs[:] = []
                    case_path = Path(folder)
                    found.setdefault(case_path, Case(case_path.relative_to(path).as_posix(), case_path, root))
        if len(found) == before and not any(c.path.is_relative_to(path) for c in found.values()):
            raise SuiteError(f"{given}: no case found (a case is a folder holding {INPUT})")
    return sorted(found.values(), key=lambda c: c.path)


# ---------------------------------------------------------------- results

@dataclass
class CaseResult:
    """What running one case found.

    ``error`` means the case itself could not be run (a missing or unreadable file, a bad
    config); ``mismatches`` are the ways gpuguard's behaviour differs from what the case
    expects.  ``decision`` is the engine's first decision, when it got that far.
    """

    case: Case
    description: str = ""
    error: str | None = None
    mismatches: list[str] = field(default_factory=list)
    decision: Decision | None = None
    # A case file could not be read at all (a FIFO, a device, an oversize file, an alias bomb):
    # not a finding about gpuguard but bad input, which ``gpuguard test`` exits 2 for.
    unreadable: bool = False

    @property
    def passed(self) -> bool:
        return self.error is None and not self.mismatches


class _CaseFileError(Exception):
    """A case file that cannot be used; the message names the file."""

    def __init__(self, message: str, unreadable: bool = False) -> None:
        super().__init__(message)
        self.unreadable = unreadable


def _read_yaml(path: Path, required: bool = True) -> Any:
    """The one document of a case file, read as ``gpuguard evaluate`` reads manifests (JSON rules for JSON,
    timestamps kept as strings), or ``None`` for a missing optional file."""
    if not path.exists():  # a FIFO or device is there, and refused by read_text
        if required:
            raise _CaseFileError(f"{path.name} is missing")
        return None
    try:
        _source, text = read_text(str(path))
        docs = parse_values(text, str(path))
    except ManifestError as exc:
        raise _CaseFileError(f"{exc.location}: {_reading(exc)}", _unusable(exc.error.kind)) from None
    if len(docs) != 1:
        raise _CaseFileError(f"{path}: expected one YAML document, found {len(docs)}")
    # JSON round trip: what the apiserver would send (non-string keys become strings), so comparisons are fair.
    try:
        return orjson.loads(orjson.dumps(docs[0], option=orjson.OPT_NON_STR_KEYS))
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise _CaseFileError(f"{path}: not representable as JSON: {exc}") from None


def _unusable(kind: str) -> bool:
    return kind in (UNREADABLE, TOO_LARGE)


def _reading(exc: ManifestError) -> str:
    return f"cannot read: {exc.error.message}" if exc.error.kind == UNREADABLE else exc.error.message


def _model(model: type[_Model], data: Any, path: Path) -> Any:
    try:
        return model.model_validate({} if data is None else data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: "
                             f"{'unknown key' if e['type'] == 'extra_forbidden' else e['msg']}"
                             for e in exc.errors())
        raise _CaseFileError(f"{path}: {problems}") from None


def _nearest(case: Case, name: str) -> Path | None:
    """The nearest ``name`` from the case folder up to its suite root, or ``None``."""
    folder = case.path
    while True:
        if (folder / name).is_file():
            return folder / name
        if folder == case.suite_root or folder.parent == folder:
            return None
        folder = folder.parent


# ---------------------------------------------------------------- engines, compiled once per config file

@lru_cache(maxsize=64)
def _config(path: str | None) -> Config | str:
    """The compiled config of a file (``None``: the shipped default), or why it was refused."""
    try:
        return load_config(path)
    except ConfigError as exc:
        return str(exc)


def _only(policies: PolicySet, only: frozenset[str]) -> PolicySet:
    return PolicySet(tuple(p for p in policies.mutating if p[0].id in only),
                     tuple(p for p in policies.validating if p[0].id in only),
                     tuple(p for p in policies.custom if p[0].id in only))


@lru_cache(maxsize=256)
def _engine(path: str | None, only: tuple[str, ...] | None) -> Engine | str:
    """An engine for a config file, with every policy not in ``only`` off (in every profile too)."""
    config = _config(path)
    if isinstance(config, str) or only is None:
        return config if isinstance(config, str) else Engine(config)
    from gpuguard.policies import REGISTRY

    unknown = [p for p in only if p not in REGISTRY and p not in config.custom]
    if unknown:
        known = [*REGISTRY, *config.custom.rules]
        return f"only: unknown policy {', '.join(unknown)} (known: {', '.join(known)})"
    keep = frozenset(only)
    restricted = Config(config.raw, _only(config.policies, keep),
                        [replace(p, policies=_only(p.policies, keep)) for p in config.profiles], config.source,
                        config.accelerators, config.custom, config.kinds)
    return Engine(restricted)


# ---------------------------------------------------------------- running a case

def _objects(case: Case) -> list[Any] | None:
    """The case's ``objects.yaml``: what its input may name and the engine may look up (Lists flattened)."""
    path = case.path / OBJECTS
    if not path.exists():
        return None
    docs = list(load([str(path)]))
    broken = next((d for d in docs if d.error), None)
    if broken is not None and broken.error is not None:
        raise _CaseFileError(f"{OBJECTS}: {broken.location}: {broken.error.message}", _unusable(broken.error.kind))
    return [d.obj for d in docs]


def read_nodes(path: str) -> Inventory:
    """The node inventory of a file of Node and Karpenter NodePool objects (``kubectl get nodes -o yaml``).

    Raises ``ManifestError`` for a file that cannot be read or parsed.
    """
    docs = list(load([path]))
    broken = next((d for d in docs if d.error), None)
    if broken is not None and broken.error is not None:
        raise ManifestError(broken.source, broken.error, broken.line, broken.column)
    return inventory.from_objects(d.obj for d in docs)


def _nodes(case: Case, engine: Engine, default: Inventory | None) -> Engine:
    """The case's engine with its ``nodes.yaml`` inventory, else ``default`` (``gpuguard test --nodes``).

    A new engine: the cached one stays without nodes.
    """
    path = case.path / NODES
    if not path.exists():
        return engine if default is None else Engine(engine.config, engine.claims, default)
    try:
        nodes = read_nodes(str(path))
    except ManifestError as exc:
        raise _CaseFileError(f"{NODES}: {exc}", _unusable(exc.error.kind)) from None
    return Engine(engine.config, engine.claims, nodes)


def _stored_under(request: Request, obj: Any) -> Request:
    """An object with its own ``metadata.namespace`` is reviewed in it (the apiserver refuses a request
    for another namespace), unless the case sets ``request.namespace``."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    if request.namespace is not None or not isinstance(namespace, str) or not namespace:
        return request
    return request.model_copy(update={"namespace": namespace})


def _context(request: Request, old: Any, objects: StaticLookup | None = None) -> RequestContext:
    return RequestContext(operation=request.operation or "CREATE", read_object=objects,
                          list_objects=objects.list_objects if objects is not None else None,
                          namespace=request.namespace if request.namespace is not None else "default",
                          namespace_labels=dict(request.namespace_labels or {}),
                          username=request.username if request.username is not None else "alice",
                          groups=tuple(request.groups if request.groups is not None else ["system:authenticated"]),
                          old_object=old)


def _finding_mismatches(expected: list[ExpectedFinding], actual: list[Violation]) -> list[str]:
    """Match expected findings to actual ones as multisets; the most specific expectations are matched first."""
    left = list(actual)
    missing: list[ExpectedFinding] = []
    for want in sorted(expected, key=lambda f: (f.path is None, f.message_contains is None)):
        hit = next((v for v in left if want.matches(v)), None)
        if hit is None:
            missing.append(want)
        else:
            left.remove(hit)
    out = [f"expected a {want} but there was none" for want in missing]
    out += [f"unexpected {v.verdict} from {v.policy} at {v.path}: {v.message}" for v in left]
    return out


def _differences(expected: Any, actual: Any, limit: int = 8) -> str:
    """What turns ``expected`` into ``actual``, as JSON pointers (the readable part of a diff)."""
    ops = make_patch(expected, actual)
    shown = [f"{op['op']} {op['path'] or '/'}" + (f" = {orjson.dumps(op['value']).decode()}" if "value" in op else "")
             for op in ops[:limit]]
    more = f" and {len(ops) - limit} more" if len(ops) > limit else ""
    return "; ".join(shown) + more


def _check(case: Case, result: CaseResult, nodes: Inventory | None = None) -> None:
    expect = _model(Expectation, _read_yaml(case.path / EXPECT), case.path / EXPECT)
    result.description = expect.description
    suite_file = _nearest(case, SUITE)
    suite = _model(SuiteDefaults, _read_yaml(suite_file), suite_file) if suite_file else SuiteDefaults()
    obj = _read_yaml(case.path / INPUT)
    expected_obj = _read_yaml(case.path / MUTATED, required=False)
    old = _read_yaml(case.path / OLD, required=False)
    request = expect.request.over(suite.request)
    if request.operation == "UPDATE" and old is None:
        raise _CaseFileError(f"request.operation is UPDATE but {OLD} is missing")
    if old is not None and request.operation != "UPDATE":
        raise _CaseFileError(f"{OLD} is only read for UPDATE cases: set request.operation: UPDATE")
    only = expect.only if expect.only is not None else suite.only
    config_file = _nearest(case, CONFIG)
    engine = _engine(str(config_file) if config_file else None, tuple(only) if only is not None else None)
    if isinstance(engine, str):
        raise _CaseFileError(engine)

    engine = _nodes(case, engine, nodes)
    objects = _objects(case)
    if objects is not None:  # the DRA claims it holds, and the ones its ComputeDomains make, resolve pods' claims
        engine = copy.copy(engine)
        engine.claims = StaticClaims(objects, origin=OBJECTS)
    ctx = _context(_stored_under(request, obj), old, StaticLookup(objects) if objects is not None else None)
    decision = unresolved_as_finding(engine.evaluate(obj, ctx))
    result.decision = decision
    mismatches = result.mismatches
    if decision.error:
        mismatches.append(f"the engine could not evaluate the object: {decision.error}")
    if decision.allowed != expect.allowed:
        mismatches.append(f"expected {'allowed' if expect.allowed else 'denied'}, "
                          f"got {'allowed' if decision.allowed else 'denied'}")
    mismatches += _finding_mismatches(expect.violations, decision.violations)
    if sorted(decision.mutated_by) != sorted(expect.mutated_by):
        mismatches.append(f"expected mutatedBy {sorted(expect.mutated_by)}, got {sorted(decision.mutated_by)}")
    want = expected_obj if expected_obj is not None else obj
    if decision.mutated != want:
        source = MUTATED if expected_obj is not None else f"{INPUT} (no {MUTATED}: nothing should change)"
        mismatches.append(f"the mutated object differs from {source}: {_differences(want, decision.mutated)}")
    try:
        patched = jsonpatch.apply_patch(obj, decision.patch)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        mismatches.append(f"the JSON patch does not apply to {INPUT}: {exc}")
    else:
        if patched != decision.mutated:
            mismatches.append(f"the JSON patch applied to {INPUT} does not give the mutated object: "
                              f"{_differences(decision.mutated, patched)}")
    if decision.mutated_by and isinstance(decision.mutated, dict):
        again = engine.evaluate(decision.mutated, ctx)
        if again.patch:
            mismatches.append("evaluating the mutated object again changes it (mutations must be idempotent): "
                              f"{_differences(decision.mutated, again.mutated)}")


def run_case(case: Case, nodes: Inventory | None = None) -> CaseResult:
    """Run one case (with ``nodes`` unless it has its own ``nodes.yaml``); never raises for a broken case."""
    result = CaseResult(case)
    try:
        _check(case, result, nodes)
    except _CaseFileError as exc:
        result.error = str(exc)
        result.unreadable = exc.unreadable
        result.mismatches.clear()
    return result


# ---------------------------------------------------------------- the policies' shipped examples

def run_example(policy_id: str) -> CaseResult:
    """A policy's shipped example (``policies/examples/<id>.yaml``, shown by ``gpuguard explain``) as a case:
    with only that policy on, the default config and request, it must pass with nothing denied, warned
    about or changed, so the example users read is a tested, passing manifest."""
    from gpuguard.policies.base import example_file, example_text
    from gpuguard.webhook.manifests import parse_text

    path = Path(str(example_file(policy_id)))
    result = CaseResult(Case(f"{policy_id}/example", path, path.parent),
                        f"the passing example gpuguard explain shows for {policy_id} (nothing to change or report)")
    docs = list(parse_text(example_text(policy_id), str(path)))
    engine = _engine(None, (policy_id,))
    if len(docs) != 1 or docs[0].obj is None or isinstance(engine, str):
        result.error = engine if isinstance(engine, str) else f"{path}: expected one Kubernetes object"
        return result
    obj = docs[0].obj
    decision = result.decision = unresolved_as_finding(engine.evaluate(obj, _context(Request(), None)))
    if decision.error:
        result.mismatches.append(f"the engine could not evaluate the example: {decision.error}")
    if not decision.allowed:
        result.mismatches.append("expected allowed, got denied")
    result.mismatches += _finding_mismatches([], decision.violations)
    if decision.mutated_by or decision.mutated != obj:
        result.mismatches.append(f"the example is changed by {sorted(decision.mutated_by)}: "
                                 f"{_differences(obj, decision.mutated)}")
    return result
