"""The README's policy table lists every policy with its real default action."""

from __future__ import annotations

import re

from gpuguard.policies import REGISTRY
from tests.support.paths import REPO

README = (REPO / "README.md").read_text()


def test_readme_policy_table_matches_registry():
    rows = re.findall(r"^\| `([a-z-]+)` \| (mutating|validating) \| (enforce|warn|audit|off) \|", README, re.M)
    assert [(pid, phase, action) for pid, phase, action in rows] == [
        (p.id, p.phase, p.default_action) for p in REGISTRY.values()]


def test_readme_first_commands_are_install_run_and_test():
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0] == "pip install -e '.[test]' && gpuguard evaluate examples/gpu-job.yaml"
    assert block[1] == "bash scripts/test.sh"
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
