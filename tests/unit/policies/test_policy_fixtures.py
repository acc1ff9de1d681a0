"""Every case under ``tests/policies/`` (format: ``docs/policy-fixtures.md``), each its own test.

One generic test, as Polaris runs ``test/checks/<id>/``: the cases themselves are YAML a
reader can open (input, expected decision, expected mutated object).  ``gpuguard.webhook.suite`` runs
them exactly as ``gpuguard test`` does, applying each patch with ``jsonpatch`` and checking
that a second evaluation changes nothing.

Each policy's ``example`` (shown by ``gpuguard explain`` and in SARIF rule help) is a data file
of the package, ``policies/examples/<id>.yaml``, so it ships where ``tests/`` does not; each runs
here as a case that must pass with nothing to change or report, so the example users read is a
tested, passing manifest.
"""

from __future__ import annotations

import pytest
import yaml

from gpuguard.policies import REGISTRY, base
from gpuguard.webhook import suite
from tests.support.paths import REPO

FIXTURES = REPO / "tests" / "policies"
EXAMPLES = REPO / "policies" / "examples"
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
    assert cases, f"{policy_id}: give it fixture cases (its example runs on its own)"


@pytest.mark.parametrize("policy_id", list(REGISTRY))
def test_each_policy_example_passes(policy_id: str) -> None:
    result = suite.run_example(policy_id)
    assert result.error is None, f"{result.case.path}: {result.error}"
    assert not result.mismatches, "\n".join([f"{result.case.path}: {result.description}", *result.mismatches])


def test_every_example_file_is_a_policy() -> None:
    shipped = {p.name.removesuffix(".yaml") for p in EXAMPLES.iterdir() if p.name.endswith(".yaml")}
    assert shipped == set(REGISTRY), f"examples without a policy: {sorted(shipped - set(REGISTRY))}"


def test_an_example_that_a_policy_changes_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner really checks: job-ttl's example without its TTL is mutated, so it is reported."""
    text = REGISTRY["job-ttl"].example.replace("  ttlSecondsAfterFinished: 86400\n", "")
    monkeypatch.setattr(base, "example_text", lambda policy_id: text)
    result = suite.run_example("job-ttl")
    assert result.error is None and any("changed by ['job-ttl']" in m for m in result.mismatches)


def test_every_fixture_folder_is_a_policy() -> None:
    folders = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert folders == set(REGISTRY), f"folders without a policy: {sorted(folders - set(REGISTRY))}"
