"""The fixture runner (``webhook/suite.py``): discovery, inheritance, and every check it makes.

Each test writes a small suite to a temporary folder, as an admin would, and asserts what
``run_case`` reports for it: passing cases pass, and each way a case can be wrong gives the
mismatch sentence a reader needs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuguard.webhook import suite

GPU_JOB = {
    "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": "ml"},
    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
        {"name": "trainer", "image": "ghcr.io/example/train:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
}


def with_ttl(obj: dict, ttl: int = 86400) -> dict:
    out = yaml.safe_load(yaml.safe_dump(obj))
    out["spec"]["ttlSecondsAfterFinished"] = ttl
    out["metadata"]["annotations"] = {"gpuguard.io/mutated-by": "job-ttl"}
    return out


def write_case(folder: Path, expect: dict, input_obj: dict = GPU_JOB, **files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.yaml").write_text(yaml.safe_dump(input_obj))
    (folder / "expect.yaml").write_text(yaml.safe_dump(expect))
    for name, content in files.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(content))
    return folder


def run_one(path: Path) -> suite.CaseResult:
    [case] = suite.discover([path])
    return suite.run_case(case)


def test_mutating_case_passes_and_checks_patch_and_idempotency(tmp_path):
    write_case(tmp_path / "ttl", {"only": ["job-ttl"], "allowed": True, "mutatedBy": ["job-ttl"]},
               mutated=with_ttl(GPU_JOB))
    result = run_one(tmp_path / "ttl")
    assert result.passed, result.mismatches
    assert result.decision is not None and result.decision.patch


def test_wrong_mutated_object_is_reported_with_the_differing_path(tmp_path):
    write_case(tmp_path / "ttl", {"only": ["job-ttl"], "allowed": True, "mutatedBy": ["job-ttl"]},
               mutated=with_ttl(GPU_JOB, ttl=60))
    result = run_one(tmp_path / "ttl")
    assert not result.passed and result.error is None
    assert any("/spec/ttlSecondsAfterFinished = 86400" in m for m in result.mismatches), result.mismatches


def test_missing_mutated_yaml_means_nothing_may_change(tmp_path):
    write_case(tmp_path / "ttl", {"only": ["job-ttl"], "allowed": True, "mutatedBy": ["job-ttl"]})
    result = run_one(tmp_path / "ttl")
    assert any("no mutated.yaml" in m for m in result.mismatches)


def test_findings_are_matched_exactly_and_in_any_order(tmp_path):
    deny = {"policy": "checkpoint-volume", "action": "deny", "path": "spec.template.spec.containers[0]"}
    write_case(tmp_path / "ok", {"only": ["checkpoint-volume"], "allowed": False, "violations": [deny]})
    assert run_one(tmp_path / "ok").passed
    write_case(tmp_path / "wrong-path", {"only": ["checkpoint-volume"], "allowed": False,
                                         "violations": [{**deny, "path": "spec"}]})
    mismatches = run_one(tmp_path / "wrong-path").mismatches
    assert any(m.startswith("expected a deny from checkpoint-volume at spec ") for m in mismatches)
    assert any(m.startswith("unexpected deny from checkpoint-volume") for m in mismatches)
    write_case(tmp_path / "none-expected", {"only": ["checkpoint-volume"], "allowed": True})
    mismatches = run_one(tmp_path / "none-expected").mismatches
    assert "expected allowed, got denied" in mismatches
    assert any("unexpected deny from checkpoint-volume" in m for m in mismatches)
    said = {**deny, "messageContains": "no persistent volume for checkpoints"}
    write_case(tmp_path / "message", {"only": ["checkpoint-volume"], "allowed": False, "violations": [said]})
    assert run_one(tmp_path / "message").passed
    write_case(tmp_path / "other-message", {"only": ["checkpoint-volume"], "allowed": False,
                                            "violations": [{**deny, "messageContains": "hostPath"}]})
    assert any("saying 'hostPath'" in m for m in run_one(tmp_path / "other-message").mismatches)
    without_path = {"policy": "checkpoint-volume", "action": "deny"}
    write_case(tmp_path / "no-path", {"only": ["checkpoint-volume"], "allowed": False, "violations": [without_path]})
    assert run_one(tmp_path / "no-path").passed


def test_suite_yaml_and_config_yaml_are_inherited_nearest_first(tmp_path):
    (tmp_path / "suite.yaml").write_text("only: [checkpoint-volume]\nrequest: {namespaceLabels: {team: research}}\n")
    (tmp_path / "config.yaml").write_text(
        "kind: GpuguardConfig\nprofiles:\n- name: research\n  match: {namespaceLabels: {team: research}}\n"
        "  policies: {checkpoint-volume: {action: warn}}\n")
    warn = {"policy": "checkpoint-volume", "action": "warn"}
    write_case(tmp_path / "group" / "warned", {"allowed": True, "violations": [warn]})
    # the case's own request refines the suite's: other namespace labels, so no profile and a deny
    write_case(tmp_path / "group" / "denied", {"allowed": False, "request": {"namespaceLabels": {}},
                                               "violations": [{**warn, "action": "deny"}]})
    # a nearer config.yaml wins over the parent's
    write_case(tmp_path / "group" / "own-config", {"allowed": True},
               config={"kind": "GpuguardConfig", "policies": {"checkpoint-volume": {"action": "off"}}})
    cases = suite.discover([tmp_path])
    assert [c.name for c in cases] == ["group/denied", "group/own-config", "group/warned"]
    results = {c.name: suite.run_case(c) for c in cases}
    assert all(r.passed for r in results.values()), {n: r.mismatches or r.error for n, r in results.items()}


def test_pointing_at_one_case_keeps_its_suite_settings(tmp_path):
    (tmp_path / ".git").mkdir()  # the repository root: the search for suite.yaml goes no higher
    (tmp_path / "suite.yaml").write_text("only: [no-such-policy]\n")  # farther than the nearest: unused
    (tmp_path / "ttl-suite" / "suite.yaml").parent.mkdir()
    (tmp_path / "ttl-suite" / "suite.yaml").write_text("only: [job-ttl]\n")
    write_case(tmp_path / "ttl-suite" / "group" / "ttl", {"allowed": True, "mutatedBy": ["job-ttl"]},
               mutated=with_ttl(GPU_JOB))
    assert run_one(tmp_path / "ttl-suite" / "group" / "ttl" / "input.yaml").passed


def test_only_turns_off_every_other_policy_in_profiles_too(tmp_path):
    write_case(tmp_path / "sandbox", {"only": ["job-ttl"], "allowed": True, "mutatedBy": ["job-ttl"],
                                      "request": {"namespaceLabels": {"gpuguard.io/profile": "sandbox"}}},
               mutated=with_ttl(GPU_JOB))
    result = run_one(tmp_path / "sandbox")
    assert result.passed, result.mismatches


def test_update_cases_need_old_yaml_and_pass_it_to_the_engine(tmp_path):
    old = yaml.safe_load(yaml.safe_dump(GPU_JOB))
    write_case(tmp_path / "update", {"only": ["checkpoint-volume"], "request": {"operation": "UPDATE"},
                                     "allowed": True}, old=old)
    # the old object had the finding too: an update may not be denied for what it does not change
    assert run_one(tmp_path / "update").passed
    write_case(tmp_path / "no-old", {"request": {"operation": "UPDATE"}, "allowed": True})
    assert "old.yaml is missing" in run_one(tmp_path / "no-old").error
    write_case(tmp_path / "old-on-create", {"allowed": True}, old=old)
    assert "only read for UPDATE" in run_one(tmp_path / "old-on-create").error


@pytest.mark.parametrize("expect,files,words", [
    ({"allowed": True, "surprise": 1}, {}, "surprise: unknown key"),
    ({"violations": []}, {}, "allowed: Field required"),
    ({"allowed": True, "only": ["no-such-policy"]}, {}, "unknown policy no-such-policy"),
    ({"allowed": True}, {"config": {"kind": "GpuguardConfig", "bogus": 1}}, "bogus: unknown key"),
])
def test_broken_cases_are_errors_not_tracebacks(tmp_path, expect, files, words):
    write_case(tmp_path / "c", expect, **files)
    result = run_one(tmp_path / "c")
    assert not result.passed and result.error and words in result.error, result.error


def test_unreadable_input_and_missing_expect(tmp_path):
    case = write_case(tmp_path / "c", {"allowed": True})
    (case / "input.yaml").write_text("a: [\n")
    assert "invalid YAML" in run_one(case).error
    (case / "input.yaml").write_text("a: 1\n---\nb: 2\n")
    assert "expected one YAML document, found 2" in run_one(case).error
    (case / "expect.yaml").unlink()
    assert run_one(case).error == "expect.yaml is missing"


def test_discover_refuses_missing_and_empty_paths(tmp_path):
    with pytest.raises(suite.SuiteError, match="no such folder"):
        suite.discover([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(suite.SuiteError, match="no case found"):
        suite.discover([tmp_path / "empty"])


def test_discover_lists_each_case_once_and_does_not_look_inside_cases(tmp_path):
    write_case(tmp_path / "a", {"allowed": True})
    write_case(tmp_path / "a" / "nested", {"allowed": True})
    write_case(tmp_path / "b", {"allowed": True})
    cases = suite.discover([tmp_path, tmp_path / "b"])
    assert [c.name for c in cases] == ["a", "b"]


def test_case_files_are_read_by_the_manifest_reader(tmp_path):
    """Errors name the file and line; objects.yaml documents must be Kubernetes objects (Lists flattened)."""
    case = write_case(tmp_path / "c", {"allowed": True})
    (case / "input.yaml").write_text("# a comment\na: [\n")
    assert run_one(case).error.startswith(f"{case / 'input.yaml'}:3: invalid YAML")
    (case / "input.yaml").write_bytes(b"name: caf\xe9\n")
    assert "cannot read: not UTF-8 text" in run_one(case).error
    (case / "input.yaml").write_text(yaml.safe_dump(with_ttl(GPU_JOB)))
    (case / "objects.yaml").write_text("apiVersion: v1\nkind: List\nitems: [{metadata: {name: x}}]\n")
    assert "objects.yaml" in run_one(case).error and "no apiVersion or kind" in run_one(case).error
