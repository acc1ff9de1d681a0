"""Every shell reaches the engine's decision, on every policy fixture.

The engine is the only decider: the webhook (``/mutate`` then ``/validate``), ``gpuguard
evaluate``, ``gpuguard audit``, ``gpuguard test`` and ``gpuguard fix`` only carry its answer.
A shell that decided anything itself (a check before the engine, a skip the others don't
make) would admit in CI what the cluster refuses, or the reverse.  So each fixture input is
run through all of them with the same config and the same request, and their answers — allowed,
the policies that deny and warn, the mutated object — must be equal.

Cases are the fixture inputs of ``tests/policies`` plus bad-quantity objects that only the
engine's pre-check refuses (the webhook once refused them and the CLIs passed them), a null GPU
count among them.
"""

from __future__ import annotations

import copy
import io
import re
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml

from gpuguard.webhook import suite
from gpuguard.webhook.config import load_config
from gpuguard.webhook.decision import RequestContext, unresolved_as_finding
from gpuguard.webhook.engine.core import MUTATED_BY_ANNOTATION, Engine
from gpuguard.webhook.main import main
from gpuguard.webhook.objects import LISTABLE_CORE, READABLE, READABLE_CORE, ApiLookup, StaticLookup
from gpuguard.webhook.server import metrics
from gpuguard.workloads import claims
from gpuguard.workloads.claims import StaticClaims
from tests.support.asgi_client import AsgiClient, make_app
from tests.support.paths import REPO
from tests.support.server import decoded_patch, review

FIXTURES = REPO / "tests" / "policies"
NAMESPACE = "default"
POLICY_ID = re.compile(r"^\[([a-z][a-z0-9-]*)\] ", re.M)  # a finding line starts with its policy id


@dataclass(frozen=True)
class Answer:
    """What a shell says of one object: comparable across shells."""

    allowed: bool
    denied: tuple[str, ...]
    warned: tuple[str, ...]
    mutated: Any


def _bad_quantity_job(value: Any) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bad-quantity"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "trainer", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": value}}}]}}}}


def _cases() -> list[tuple[str, Path | None, list[dict], list[dict], Path | None]]:
    """(id, config file or None for the default, the input object(s), objects it may name, its nodes.yaml)."""
    cases = []
    for input_file in sorted(FIXTURES.rglob(suite.INPUT)):
        folder = input_file.parent
        config = next((p / suite.CONFIG for p in (folder, *folder.parents)
                       if (p / suite.CONFIG).is_file() and FIXTURES in p.parents), None)
        objects_file = folder / suite.OBJECTS
        objects = list(yaml.safe_load_all(objects_file.read_text())) if objects_file.is_file() else []
        docs = [d for d in yaml.safe_load_all(input_file.read_text()) if isinstance(d, dict)]
        nodes = folder / suite.NODES
        cases.append((str(folder.relative_to(FIXTURES)), config, docs[:1], objects, nodes if nodes.is_file() else None))
    for value in ("1e800000", "NaN", "8Ei", None, [1]):  # None: `nvidia.com/gpu:` with no value
        cases.append((f"invalid-quantity-{value}", None, [_bad_quantity_job(value)], [], None))
    return cases


CASES = _cases()


def _in_namespace(obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    obj.setdefault("metadata", {}).setdefault("namespace", NAMESPACE)
    return obj


def _from_entry(entry: dict, obj: dict) -> Answer:
    mutated = jsonpatch.apply_patch(obj, entry["patch"]) if entry["patch"] else obj
    return Answer(entry["allowed"], tuple(sorted(v["policy"] for v in entry["violations"] if v["action"] == "deny")),
                  tuple(sorted(v["policy"] for v in entry["violations"] if v["action"] == "warn")), mutated)


def _run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _manifest(tmp_path: Path, obj: dict, objects: list[dict]) -> Path:
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump_all([obj, *objects], sort_keys=False))
    return path


def _config_args(config: Path | None, nodes: Path | None = None) -> list[str]:
    return (["--config", str(config)] if config else []) + (["--nodes", str(nodes)] if nodes else [])


def by_engine(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path, nodes: Path | None) -> Answer:
    # The webhook's claim watch holds the claims (and what a ComputeDomain makes) the case's objects hold.
    engine = Engine(load_config(config), StaticClaims(objects), nodes=suite.read_nodes(str(nodes)) if nodes else None)
    # The apiserver stores an object under its own metadata.namespace (the request's namespace).
    namespace = obj.get("metadata", {}).get("namespace", NAMESPACE)
    # What can't be judged is refused with its reason: the file shells show it as a not-fully-checked finding.
    decision = unresolved_as_finding(
        engine.evaluate(obj, RequestContext(namespace=namespace, read_object=StaticLookup(objects))))
    return Answer(decision.allowed, tuple(sorted(v.policy for v in decision.denials)),
                  tuple(sorted(v.policy for v in decision.warnings)), decision.mutated)


def by_evaluate(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path,
                nodes: Path | None) -> Answer:
    _, out, err = _run_cli("evaluate", str(_manifest(tmp_path, obj, objects)), "--format", "json",
                           *_config_args(config, nodes))
    data = orjson.loads(out)
    entries = data["results"] if isinstance(data, dict) else data
    return _from_entry(entries[0], obj)


def by_audit(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path, nodes: Path | None) -> Answer:
    _, out, _ = _run_cli("audit", str(_manifest(tmp_path, obj, objects)), "--format", "json", "--fail-on", "never",
                         *_config_args(config, nodes))
    return _from_entry(orjson.loads(out)["results"][0], obj)


def by_test(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path, nodes: Path | None) -> Answer:
    case_dir = tmp_path / "suite" / "case"
    case_dir.mkdir(parents=True)
    (case_dir / suite.INPUT).write_text(yaml.safe_dump(obj, sort_keys=False))
    (case_dir / suite.EXPECT).write_text("allowed: true\n")
    if objects:
        (case_dir / suite.OBJECTS).write_text(yaml.safe_dump_all(objects, sort_keys=False))
    if config:
        (case_dir / suite.CONFIG).write_text(config.read_text())
    if nodes:
        (case_dir / suite.NODES).write_text(nodes.read_text())
    (case,) = suite.discover([case_dir])
    decision = suite.run_case(case).decision
    assert decision is not None
    return Answer(decision.allowed, tuple(sorted(v.policy for v in decision.denials)),
                  tuple(sorted(v.policy for v in decision.warnings)), decision.mutated)


def by_fix(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path, nodes: Path | None) -> Answer:
    path = tmp_path / "fix.yaml"
    path.write_text(yaml.safe_dump_all([obj, *objects], sort_keys=False))
    code, out, err = _run_cli("fix", str(path), "--stdout", *_config_args(config, nodes))
    assert code in (0, 1), err
    denied = tuple(sorted(set(re.findall(r"\[([a-z][a-z0-9-]*)\]", err)))) if code == 1 else ()
    return Answer(code == 0, denied, (), next(yaml.safe_load_all(out)))


def _without_mutated_by(obj: Any) -> Any:
    """``gpuguard fix`` writes the changes, not the webhook's record of them (docs/fix.md)."""
    obj = copy.deepcopy(obj)
    annotations = obj.get("metadata", {}).get("annotations", {})
    annotations.pop(MUTATED_BY_ANNOTATION, None)
    if not annotations:
        obj.get("metadata", {}).pop("annotations", None)
    return obj


def _warned(response: dict) -> list[str]:
    return [m.group(1) for w in response.get("warnings", []) if (m := POLICY_ID.match(w))]


class _ObjectsApi:
    """The cluster's copy of the objects a workload names, as the server's reader sees them."""

    def __init__(self, objects: list[dict]) -> None:
        self._objects = StaticLookup(objects)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **_: Any) -> dict:
        return self._found(group, plural, namespace, name)

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str, **_: Any) -> dict:
        return self._found(group, plural, None, name)

    def list_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, **_: Any) -> dict:
        return {"items": self._listed(group, plural, namespace)}

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **_: Any) -> dict:
        return {"items": self._listed(group, plural, None)}

    def _listed(self, group: str, plural: str, namespace: str | None) -> list[dict]:
        return [obj for (g, kind), (_, p) in {**READABLE, **LISTABLE_CORE}.items() if g == group and p == plural
                for obj in self._objects.list_objects(g, kind, namespace)]

    def _found(self, group: str, plural: str, namespace: str | None, name: str) -> dict:
        for (g, kind), (_, p) in {**READABLE, **READABLE_CORE}.items():  # core kinds: a claim's access modes
            if g == group and p == plural and (obj := self._objects(g, kind, namespace, name)) is not None:
                return obj
        raise LookupError(name)


def by_webhook(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path, nodes: Path | None,
               one_pass: bool = False) -> Answer:
    """The apiserver's two reviews of a create.  ``one_pass``: the validating review takes the mutating review's
    evaluation (``webhook/server/onepass.py``) whenever it receives the object /mutate returned; else the server
    keeps nothing, so each review evaluates on its own."""
    client = AsgiClient(make_app(config.read_text() if config else None))
    server = client.app.state.server
    if not one_pass:
        server.one_pass = None
    client.app.state.server.objects = ApiLookup(api=_ObjectsApi(objects))
    # As deployed (deploy/base: --dra-claims, --node-inventory): a server that reads the cluster lists quotas too.
    server.settings = replace(server.settings, dra_claims=True)
    claims.set_shared(StaticClaims(objects, origin="the claim watch"))  # what the server's claim watch holds
    if nodes:  # what the server's node watch hands the engine (webhook/server/nodewatch.py)
        client.app.state.server.apply_nodes(suite.read_nodes(str(nodes)))
    try:
        _, mutated_review = client.post_json("/mutate", review(obj))
        response = mutated_review["response"]
        if not response["allowed"]:
            message = response["status"]["message"]
            # What can't be judged is refused with the reason; the file shells call it not-fully-checked.
            ids = POLICY_ID.findall(message) or (["not-fully-checked"] if "could not check" in message else [])
            return Answer(False, tuple(sorted(ids)), (), obj)
        warned = _warned(response)  # what mutating policies in warn mode would change
        mutated = jsonpatch.apply_patch(obj, decoded_patch(response)) if "patch" in response else obj
        kept = len(server.one_pass) if one_pass else 0
        reused = metrics.ONE_PASS.labels(result="reused")._value.get()
        _, validated = client.post_json("/validate", review(mutated))  # the apiserver's own uid
        # What /mutate kept for the object it returned is what /validate used: the digest sees past nothing else.
        assert metrics.ONE_PASS.labels(result="reused")._value.get() - reused == kept
        response = validated["response"]
        denied = POLICY_ID.findall(response.get("status", {}).get("message", "")) if not response["allowed"] else []
        return Answer(response["allowed"], tuple(sorted(denied)), tuple(sorted(warned + _warned(response))), mutated)
    finally:
        claims.set_shared(None)
        client.close()


def by_webhook_one_pass(config: Path | None, obj: dict, objects: list[dict], tmp_path: Path,
                        nodes: Path | None) -> Answer:
    return by_webhook(config, obj, objects, tmp_path, nodes, one_pass=True)


SHELLS = {"webhook": by_webhook, "webhook-one-pass": by_webhook_one_pass, "evaluate": by_evaluate,
          "audit": by_audit, "test": by_test}


@pytest.mark.parametrize(("case_id", "config", "docs", "objects", "nodes"), CASES, ids=[c[0] for c in CASES])
def test_every_shell_reaches_the_engines_decision(case_id: str, config: Path | None, docs: list[dict],
                                                  objects: list[dict], nodes: Path | None, tmp_path: Path) -> None:
    """With a case's nodes.yaml: the webhook's node watch, ``--nodes`` and the test case's nodes agree."""
    obj = _in_namespace(docs[0])
    expected = by_engine(config, obj, objects, tmp_path, nodes)
    for name, shell in SHELLS.items():
        shell_dir = tmp_path / name
        shell_dir.mkdir()
        got = shell(config, copy.deepcopy(obj), objects, shell_dir, nodes)
        assert got == expected, f"{name} differs from the engine on {case_id}"
    fixed = by_fix(config, copy.deepcopy(obj), objects, tmp_path, nodes)
    assert (fixed.allowed, fixed.mutated) == (expected.allowed, _without_mutated_by(expected.mutated)), \
        f"fix differs on {case_id}"
    if not expected.allowed:
        assert set(fixed.denied) >= set(expected.denied), f"fix names other denials on {case_id}"


def test_a_bad_quantity_is_denied_by_every_shell(tmp_path: Path) -> None:
    """The finding that once lived only in the webhook: now the CLI shells refuse it too, with the reason."""
    path = _manifest(tmp_path, _in_namespace(_bad_quantity_job("1e800000")), [])
    code, out, _ = _run_cli("evaluate", str(path), "--format", "json", "--fail-on-deny")
    entry = orjson.loads(out)
    entry = (entry["results"] if isinstance(entry, dict) else entry)[0]
    assert entry["allowed"] is False and code == 1
    (violation,) = entry["violations"]
    assert violation["policy"] == "invalid-quantity"
    assert "not a usable quantity" in violation["message"]
    assert violation["path"] == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    code, out, _ = _run_cli("audit", str(path), "--format", "sarif")
    assert code == 1 and '"ruleId": "invalid-quantity"' in out.replace('":"', '": "')
