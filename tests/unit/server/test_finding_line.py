"""Warnings and denials fit what kubectl prints (256 characters, one line) and keep their fix whole.

Checked over every finding the policy fixtures produce (``tests/policies``), as the webhook would send each as
a warning, and over findings written to be too long."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.webhook import suite
from gpuguard.webhook.decision import Violation
from gpuguard.webhook.server.envelope import WARNING_HARD_LIMIT, denial_message, finding_line

FIXTURES = Path(__file__).resolve().parents[2] / "policies"


def _fixture_violations() -> list[tuple[str, Violation]]:
    found = []
    for case in suite.discover([FIXTURES]):
        decision = suite.run_case(case).decision
        for violation in decision.violations if decision is not None else []:
            found.append((str(case.path.relative_to(FIXTURES)), violation))
    return found


VIOLATIONS = _fixture_violations()


def test_the_fixtures_produce_findings_to_check():
    assert len(VIOLATIONS) > 100
    assert len({v.policy for _, v in VIOLATIONS}) >= 10


def _first_alternative(fix: str) -> str:
    """What a fix must keep whole: its first alternative, or the first item of that one's list."""
    first = fix.rstrip(".").split("; ")[0]
    return first if len(first) < 100 else first.split(", ")[0]


def test_every_fixture_finding_fits_kubectl_whole_with_its_fix():
    cut = 0
    for where, violation in VIOLATIONS:
        text = finding_line(violation)
        fix = " ".join(violation.fix.rstrip(".").split())
        assert len(text) <= WARNING_HARD_LIMIT, (where, text)
        assert "\n" not in text
        assert _first_alternative(fix) in text, (where, text)
        if fix not in text or violation.message not in text:  # cut: the command that shows the rest ends it
            assert text.startswith(f"[{violation.policy}] fix: "), (where, text)
            assert text.endswith(f"; more: kubectl gpuguard explain {violation.policy}"), (where, text)
            cut += 1
    assert cut, "no fixture finding is long enough to be cut: the fix-first form is untested"


@pytest.mark.parametrize("message_length", [300, 2000])
def test_a_long_reason_is_cut_after_the_fix_and_points_to_explain(message_length):
    fix = "mount a persistentVolumeClaim at /checkpoints or set CHECKPOINT_URI to an object store"
    violation = Violation("checkpoint-volume", "warn", "spec.template.spec.containers[0]", "x" * message_length, fix,
                          target="trainer")
    text = finding_line(violation)
    assert len(text) <= WARNING_HARD_LIMIT
    assert text.startswith(f"[checkpoint-volume] fix: {fix}. Why: xxx")
    assert "…" in text and text.endswith("; more: kubectl gpuguard explain checkpoint-volume")


def test_a_short_finding_is_sent_as_written():
    violation = Violation("shm-volume", "warn", "spec.volumes", "no /dev/shm", "add an emptyDir at /dev/shm")
    assert finding_line(violation) == violation.text


def test_a_fix_longer_than_the_line_is_cut_but_still_points_to_explain():
    violation = Violation("job-limits", "warn", "spec", "m", "y" * 400)
    text = finding_line(violation)
    assert len(text) <= WARNING_HARD_LIMIT and text.endswith("; more: kubectl gpuguard explain job-limits")


def test_every_fixture_denial_is_sent_in_lines_that_fit_with_their_fix():
    """The 403 kubectl prints: each denial on a line of its own, within 256 characters, its fix kept."""
    denials = [(where, v) for where, v in VIOLATIONS if v.verdict == "deny"]
    assert len(denials) > 50
    long = 0
    for where, violation in denials:
        message = denial_message("Job", [violation])
        header, line, *why = message.split("\n")
        assert header == "gpuguard denied this Job: 1 policy violation(s)"
        assert line == finding_line(violation, keep_path=True) and len(line) <= WARNING_HARD_LIMIT, (where, line)
        assert line.startswith(f"[{violation.policy}] {violation.path[:59]}"), (where, line)  # which field, always
        if len(violation.text) <= WARNING_HARD_LIMIT:
            assert line == violation.text and not why  # whole
        else:
            assert f": fix: {_first_alternative(violation.fix)}" in line, (where, line)
            assert line.endswith(f"; more: kubectl gpuguard explain {violation.policy}"), (where, line)
            # the reason follows on its own line, within 256 characters too: the cut line's evidence stays
            reason = " ".join(violation.message.split())
            assert len(why) == 1 and len(why[0]) <= WARNING_HARD_LIMIT, (where, why)
            assert why[0] == f"  why: {reason}" or (why[0].endswith("…") and reason.startswith(why[0][7:-1])), why
        long += len(violation.text) > WARNING_HARD_LIMIT
    assert long, "no fixture denial is long enough to be cut: the fix-first form of a denial is untested"
