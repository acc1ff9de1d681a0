"""Every derived file equals what ``scripts/generate.py`` makes of the code today.

The default config's policy settings, ``deploy/base``'s ConfigMap source and webhook
configurations, the per-kind custom-rule cases in ``tests/kinds``, the README's policy table, the
admin guide's trusted-controller table and the benchmark bodies are each derived from one owner
(the settings models, the kind table, the policy registry, the controller table).  This is the
one guard against a hand edit or a forgotten regeneration; it names the stale files and the command.
"""

from __future__ import annotations

from types import ModuleType

from tests.support.paths import REPO, load_script


def _generator() -> ModuleType:
    return load_script("generate")


def test_every_generated_file_is_up_to_date() -> None:
    generate = _generator()
    problems = []
    for stage in (generate.config_files, generate.derived_files):
        changed, extra = generate.stale(stage())
        problems += [f"stale: {path}" for path in changed] + [f"no longer generated: {path}" for path in extra]
    assert not problems, "\n".join([*problems, f"run `{generate.COMMAND}` and commit the result"])


def test_a_hand_edit_of_a_generated_region_is_caught() -> None:
    generate = _generator()
    readme = (REPO / "README.md").read_text()
    edited = readme.replace("| `job-ttl` | mutating | enforce |", "| `job-ttl` | mutating | warn |")
    assert edited != readme
    regenerated = generate.replace_region(edited, "policies", generate.policy_table(), comment="md")
    assert regenerated == readme
