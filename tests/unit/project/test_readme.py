"""The README's first commands are the ones that really install, run and test gpuguard.

Its policy table is generated (scripts/generate.py; tests/unit/project/test_generated.py checks it)."""

from __future__ import annotations

from tests.support.paths import REPO

README = (REPO / "README.md").read_text()


def test_readme_first_commands_are_install_run_and_test():
    block = README.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert block[0] == "pip install -e '.[test]' && gpuguard evaluate examples/gpu-job.yaml"
    assert block[1] == "bash scripts/test.sh"
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text()
