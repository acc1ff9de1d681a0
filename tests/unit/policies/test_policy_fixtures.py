"""Every case under ``tests/policies/`` (format: ``docs/policy-fixtures.md``), each its own test.

One generic test, as Polaris runs ``test/checks/<id>/``: the cases themselves are YAML a
reader can open (input, expected decision, expected mutated object).  ``gpuguard.webhook.suite`` runs
them exactly as ``gpuguard test`` does, applying each patch with ``jsonpatch`` and checking
that a second evaluation changes nothing.

Each policy's ``example`` (shown by ``gpuguard explain`` and in SARIF rule help) is kept in
its module, so it ships with the installed package where ``tests/`` does not; here it must
equal its fixture ``<id>/example/input.yaml`` byte for byte, and that case must pass with
nothing to change or report, so the example users read is a tested, passing manifest.
"""

from __future__ import annotations

import pytest
import yaml

from gpuguard.policies import REGISTRY
from gpuguard.webhook import suite
from tests.support.paths import REPO

FIXTURES = REPO / "tests" / "policies"
CASES = suite.discover([FIXTURES])


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_policy_fixture(case: suite.Case) -> None:
    result = suite.run_case(case)
    assert result.error is None, f"{case.path}: {result.error}"
    assert not result.mismatches, "\n".join([f"{case.path}: {result.description}", *result.mismatches])


@pytest.mark.parametrize("policy_id", list(REGISTRY))
def test_each_policy_has_a_folder_that_shows_it_alone(policy_id: str) -> None:
    folder = FIXTURES / policy_id
    assert yaml.safe_load((folder / "suite.yaml").read_text()) == {"only": [policy_id]}
    cases = [c for c in CASES if c.path.is_relative_to(folder)]
    assert len(cases) >= 2, f"{policy_id}: give it cases beyond its example"


@pytest.mark.parametrize("policy_id", list(REGISTRY))
def test_each_policy_example_is_its_passing_example_fixture(policy_id: str) -> None:
    case = FIXTURES / policy_id / "example"
    fixture = (case / "input.yaml").read_text()
    assert REGISTRY[policy_id].example == fixture, (
        f"the example in {policy_id}'s module differs from {case / 'input.yaml'}: keep them equal")
    expect = yaml.safe_load((case / "expect.yaml").read_text())
    assert expect["allowed"] is True and not expect.get("violations") and not expect.get("mutatedBy"), (
        "an example shows a manifest that passes: nothing denied, warned about or changed")


def test_every_fixture_folder_is_a_policy() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders == set(REGISTRY), f"folders without a policy: {sorted(folders - set(REGISTRY))}"
