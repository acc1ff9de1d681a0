"""``gpuguard test``: the project's own fixture suites run through the CLI, and what a failing,
broken or empty suite looks like (table, mismatch sentences, JUnit, exit codes)."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from gpuguard.webhook.main import main
from gpuguard.workloads import kinds
from tests.support.paths import REPO

ROOT = REPO
CUSTOM = ROOT / "tests" / "kinds"
# Every suite the repository ships: the built-in policies' fixtures (when present), the custom
# rules' fixtures over every kind, and the worked example in the docs.
SUITES = [p for p in (ROOT / "tests" / "policies", CUSTOM, ROOT / "examples" / "policy-suite") if p.is_dir()]


def test_the_projects_suites_pass_through_gpuguard_test(capsys, tmp_path):
    assert CUSTOM in SUITES and ROOT / "examples" / "policy-suite" in SUITES
    junit = tmp_path / "junit.xml"
    assert main(["test", *map(str, SUITES), "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    cases = ET.parse(junit).getroot().findall("./testsuite/testcase")
    assert len(cases) >= 40 and f"{len(cases)}/{len(cases)} cases passed" in out
    assert "PASS    pytorchjob/denied" in out
    assert not ET.parse(junit).getroot().findall(".//failure")


def test_custom_rule_fixtures_cover_every_kind_gpuguard_knows():
    seen: dict[tuple[str, str], set[bool]] = {}
    for expect in CUSTOM.glob("*/*/expect.yaml"):
        obj = yaml.safe_load((expect.parent / "input.yaml").read_text())
        allowed = yaml.safe_load(expect.read_text())["allowed"]
        seen.setdefault((kinds.group_of(obj["apiVersion"]), obj["kind"]), set()).add(allowed)
    # Kinds judged through a runtime (a Trainer TrainJob) need a lookup a case cannot give:
    # tests/unit/custom/test_custom_policies.py covers them.
    table = {(k.group, k.kind) for k in kinds.KINDS if k.runtime is None}
    assert set(seen) == table, ("a kind without cases: give it a builder in tests/support/builders.py, then run "
                                "python3 scripts/generate.py")
    assert all(outcomes == {True, False} for outcomes in seen.values())


def _case(root: Path, name: str, expect: dict | None, obj: dict) -> None:
    case = root / name
    case.mkdir(parents=True)
    (case / "input.yaml").write_text(yaml.safe_dump(obj))
    if expect is not None:
        (case / "expect.yaml").write_text(yaml.safe_dump(expect))


def test_a_failing_and_a_broken_case_exit_1_with_sentences_and_junit(tmp_path, capsys):
    job = yaml.safe_load((CUSTOM / "job" / "denied" / "input.yaml").read_text())
    suite = tmp_path / "suite"
    (suite).mkdir()
    (suite / "config.yaml").write_text((CUSTOM / "config.yaml").read_text())
    (suite / "suite.yaml").write_text("only: [team-label, gpu-registry]\n")
    _case(suite, "wrong", {"description": "expects the wrong thing", "allowed": True}, job)
    _case(suite, "broken", None, job)
    junit = tmp_path / "out.xml"
    assert main(["test", str(suite), "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    assert "FAIL    wrong" in out and "ERROR   broken" in out
    assert "expected allowed, got denied" in out
    assert "unexpected deny from team-label at metadata.labels.team" in out
    assert "expect.yaml is missing" in out
    assert "0/2 cases passed, 2 failed" in out
    root = ET.parse(junit).getroot()
    assert root.get("failures") == "1" and root.get("errors") == "1"
    [failure] = root.findall(".//testcase[@name='wrong']/failure")
    assert "expected allowed, got denied" in failure.text


def test_quiet_prints_nothing_when_all_pass_and_only_the_failing_cases_otherwise(tmp_path, capsys):
    assert main(["test", "-q", str(CUSTOM / "job")]) == 0
    assert capsys.readouterr().out == ""
    job = yaml.safe_load((CUSTOM / "job" / "denied" / "input.yaml").read_text())
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("config.yaml", "suite.yaml"):
        (suite / name).write_text((CUSTOM / name).read_text())
    _case(suite, "wrong", {"description": "expects the wrong thing", "allowed": True}, job)
    shutil.copytree(CUSTOM / "job" / "denied", suite / "right")
    assert main(["test", "--quiet", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "FAIL    wrong" in out and "expected allowed, got denied" in out and "right" not in out


def test_output_junit_writes_the_xml_to_stdout_and_a_file_name_points_at_junit(tmp_path, capsys):
    assert main(["test", "-o", "junit", str(CUSTOM / "job")]) == 0
    captured = capsys.readouterr()
    root = ET.fromstring(captured.out)
    assert root.get("tests") == "2" and "2/2 cases passed" in captured.err  # the table, off stdout
    assert main(["test", "--format", "junit", str(CUSTOM / "job")]) == 0  # the old spelling still works
    assert ET.fromstring(capsys.readouterr().out).get("failures") == "0"
    try:
        main(["test", "-o", "report.xml", str(CUSTOM / "job")])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "'report.xml' is not an output format" in err and "--junit report.xml" in err


def test_a_path_without_cases_is_a_usage_error(tmp_path, capsys):
    assert main(["test", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuguard: error:") and "no case found" in err
