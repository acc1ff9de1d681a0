"""The fields each mutating policy says it writes (``MutatingPolicy.writes``) are the fields it writes.

``docs/gitops.md`` and ``deploy/gitops/argocd-ignore-differences.yaml`` tell Argo CD to ignore them
(``gpuguard.webhook.catalog.owned_fields``).  Run over every fixture case with the real ``jq`` (the
language Argo CD evaluates them in): deleting those paths from the submitted and from the mutated
object leaves the same object, so nothing a policy writes is left out of the list.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from functools import cache

import pytest

from gpuguard.policies import REGISTRY
from gpuguard.webhook import suite
from gpuguard.webhook.catalog import argocd_ignore_differences, owned_fields
from gpuguard.workloads import kinds
from tests.support.paths import REPO

CASES = suite.discover([REPO / "tests" / "policies", REPO / "tests" / "kinds"])
JQ = shutil.which("jq")


def _without(obj: dict, paths: list[str]) -> object:
    assert JQ, "jq is needed (apt-get install jq): Argo CD's jqPathExpressions are checked with it"
    # A map left empty (``affinity: {}`` around a deleted ``nodeAffinity``) is no difference: three-way diffs
    # ignore a key the manifest lacks.
    program = (f"del({', '.join(paths)}) | walk(if type == \"object\" then with_entries(select(.value != {{}})) "
               "else . end)")
    out = subprocess.run([JQ, "-S", "-c", program], input=json.dumps(obj),
                         capture_output=True, text=True, check=True, timeout=30)
    return json.loads(out.stdout)


@cache
def _mutated_cases() -> list[tuple[str, kinds.KindSpec, dict, dict]]:
    found = []
    for case in CASES:
        decision = suite.run_case(case).decision
        if decision is None or not decision.patch or not isinstance(decision.original, dict):
            continue
        kind = kinds.lookup(decision.original.get("apiVersion"), decision.original.get("kind"))
        if kind is not None and kind.pod_spec_paths:
            found.append((case.path.relative_to(REPO).as_posix(), kind, decision.original, decision.mutated))
    return found


def test_deleting_the_owned_fields_leaves_nothing_a_policy_changed() -> None:
    cases = _mutated_cases()
    assert len(cases) > 50 and len({kind.kind for _, kind, _, _ in cases}) >= 8  # the check is not empty
    left = []
    for where, kind, original, mutated in cases:
        paths = [path for _, path in owned_fields(kind)]
        if _without(original, paths) != _without(mutated, paths):
            left.append(where)
    assert not left, f"changed outside the fields the policies declare (MutatingPolicy.writes): {left}"


def test_a_field_left_out_of_writes_is_caught() -> None:
    """Without ``tolerations`` in the list, a case where gpu-tolerations adds one differs."""
    where, kind, original, mutated = next(c for c in _mutated_cases() if c[0].endswith(
        "gpu-tolerations/narrower-toleration-gets-the-wider-one"))
    paths = [path for policy, path in owned_fields(kind) if policy != "gpu-tolerations"]
    assert _without(original, paths) != _without(mutated, paths), where


def test_every_mutating_policy_declares_what_it_writes() -> None:
    for policy in REGISTRY.values():
        assert policy.phase != "mutating" or getattr(policy, "writes", ()), f"{policy.id}: declare `writes`"


def test_the_argocd_list_covers_every_kind_with_its_job_fields() -> None:
    entries = {(e["group"], e["kind"]): e["jqPathExpressions"] for e in argocd_ignore_differences()}
    assert set(entries) == {(k.group, k.kind) for k in kinds.KINDS}
    assert ".spec.runPolicy.ttlSecondsAfterFinished" in entries[("kubeflow.org", "PyTorchJob")]
    assert ".spec.pytorchReplicaSpecs[]?.template.spec.tolerations" in entries[("kubeflow.org", "PyTorchJob")]
    assert ".spec.ttlStrategy.secondsAfterFailure" in entries[("argoproj.io", "Workflow")]


@pytest.mark.parametrize("entry", argocd_ignore_differences(), ids=lambda e: f"{e['group']}/{e['kind']}")
def test_each_kinds_expressions_are_jq_paths_that_tolerate_missing_fields(entry: dict) -> None:
    unrelated = {"metadata": {"name": "w"}, "spec": {"replicas": 1}}
    assert _without(unrelated, entry["jqPathExpressions"]) == unrelated
