"""The README's first commands are the ones that really install, run and test gpuguard.

Its policy table is generated (scripts/generate.py; tests/unit/project/test_generated.py checks it)."""

from __future__ import annotations

import re

from gpuguard.policies import REGISTRY
from tests.support.paths import REPO

README = (REPO / "README.md").read_text()


def test_readme_first_commands_are_install_run_and_test():
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    # The install is the test command's: at the lock's versions (requirements/, tests/unit/project/test_lock.py).
    assert block[0] == ("pip install -c requirements/constraints.txt -e '.[test]' "
                        "&& gpuguard evaluate examples/gpu-job.yaml")
    assert "pip install --quiet --disable-pip-version-check -c requirements/constraints.txt -e '.[test]'" in (
        REPO / "scripts" / "test.sh").read_text()
    assert block[1] == "bash scripts/test.sh"
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_the_kyverno_comparison_names_every_policy_it_did_not_translate():
    """The README's count of translated policies and the list of the others follow the policy registry:
    a new policy is either translated in bench/peers/kyverno/ or named as not translated."""
    translated = {p.stem for p in (REPO / "bench" / "peers" / "kyverno").glob("*.yaml")}
    section = README.split("## Compared with Kyverno", 1)[1].split("\n## ", 1)[0]
    counted = re.search(r"of the (\d+) policies translated, (\d+) carry over exactly, (\d+) only approximately",
                        section)
    assert counted, "the Kyverno section no longer says how many policies were translated"
    total, exact, approximate = map(int, counted.groups())
    assert total == len(translated) == exact + approximate
    untranslated = re.search(r"not translated: ([^)]*)\)", section)
    named = set(re.findall(r"`([a-z-]+)`", untranslated.group(1))) if untranslated else set()
    assert named == set(REGISTRY) - translated, f"name these as not translated: {sorted(set(REGISTRY) - translated)}"
