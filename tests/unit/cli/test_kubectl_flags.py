"""The flags every verb spells as kubectl does: ``-o/--output FORMAT``, ``-f/--filename PATH``, ``-q/--quiet``.

They come from one helper (``gpuguard.webhook.cli.common.add_common_flags``), so the parser of every
verb is checked here for the same spelling; then each verb is run: through ``main`` where the
output is enough, in a subprocess where a pipe, stdin or the absence of a traceback is the point.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuguard.webhook.cli.audit.formats import FORMATS
from gpuguard.webhook.main import build_parser, main
from tests.support.paths import REPO

M = REPO / "tests" / "fixtures" / "manifests"
DENIED = M / "training" / "bert-pretrain-job.yaml"
CHANGED = M / "training" / "jobset-gpt.yaml"
EXAMPLE = REPO / "examples" / "gpu-job.yaml"

#: Every verb with output formats, and its formats (the first is the default).
FORMATS_BY_VERB = {
    "audit": tuple(FORMATS),
    "evaluate": ("text", "json"),
    "test": ("table", "junit"),
    "policies": ("table", "json"),
    "explain": ("text", "json"),
    "webhook-config": ("yaml", "json"),
    "version": ("text", "json"),
}
#: Verbs that read manifests take -f; `test` reads suites (folders of cases), not manifests.
MANIFEST_VERBS = ("audit", "evaluate", "fix")
QUIET_VERBS = ("audit", "evaluate", "fix", "test")


def gpuguard(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True,
                          input=stdin, cwd=REPO, timeout=60, check=False)


def _actions(verb: str) -> dict[str, object]:
    sub = build_parser()._subparsers._group_actions[0].choices[verb]  # type: ignore[union-attr]
    return {opt: action for action in sub._actions for opt in action.option_strings}


def test_every_verb_spells_the_shared_flags_alike() -> None:
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for verb in verbs:
        actions = _actions(verb)
        output = actions.get("-o")
        if verb in FORMATS_BY_VERB:
            assert output is not None, f"{verb} has formats but no -o"
            assert output is actions["--output"] is actions["--format"] and output.dest == "format"
            assert output.default == FORMATS_BY_VERB[verb][0]
            assert output.completer() == list(FORMATS_BY_VERB[verb])  # what shell completion offers
        else:
            assert output is None, f"{verb}: -o without formats"
        filename = actions.get("-f")
        assert (filename is not None) == (verb in MANIFEST_VERBS), verb
        if filename is not None:
            assert filename is actions["--filename"] and filename.dest == "filenames"
        assert (actions.get("-q") is not None) == (verb in QUIET_VERBS), verb


@pytest.mark.parametrize("spelling", [("-o", "json"), ("-ojson",), ("--output", "json"), ("--output=json",),
                                      ("--format", "json")])
def test_audit_o_json_as_kubectl_spells_it(capsys, spelling: tuple[str, ...]) -> None:
    assert main(["audit", str(DENIED), *spelling]) == 1
    assert json.loads(capsys.readouterr().out)["summary"]["denied"] == 1


@pytest.mark.parametrize(("verb", "args"), [
    ("evaluate", (str(EXAMPLE),)), ("policies", ()), ("explain", ("job-ttl",)), ("version", ()),
    ("webhook-config", ("--service", "gpuguard/gpuguard")),
])
def test_o_json_prints_json_for_every_verb(capsys, verb: str, args: tuple[str, ...]) -> None:
    assert main([verb, *args, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_o_with_a_file_name_fails_naming_the_flag_that_writes_files() -> None:
    proc = gpuguard("audit", str(DENIED), "-o", "report.json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "'report.json' is not an output format" in proc.stderr
    assert "--output-file report.json" in proc.stderr and "Traceback" not in proc.stderr
    proc = gpuguard("evaluate", str(EXAMPLE), "--output", "yamlish")
    assert proc.returncode == 2 and "takes one of: text, json" in proc.stderr and "--output-file" not in proc.stderr


def test_output_file_takes_the_report_and_quiet_prints_nothing(tmp_path: Path) -> None:
    report = tmp_path / "report.sarif"
    proc = gpuguard("audit", str(DENIED), "-o", "sarif", "--output-file", str(report), "--quiet")
    assert proc.returncode == 1 and proc.stdout == "" and proc.stderr == ""
    assert json.loads(report.read_text())["runs"][0]["results"]
    quiet = gpuguard("audit", str(DENIED), "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (1, "", "")
    clean = gpuguard("audit", str(CHANGED), "-q", "--diff")  # --diff is output too: not printed
    assert (clean.returncode, clean.stdout) == (0, "")


def test_quiet_audit_still_says_input_errors_on_stderr() -> None:
    proc = gpuguard("audit", str(M / "invalid" / "broken-stream.yaml"), "-q")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "gpuguard: error:" in proc.stderr and "broken-stream.yaml:23" in proc.stderr


def test_filename_reads_files_folders_and_stdin_as_positional_paths(tmp_path: Path) -> None:
    by_f = gpuguard("evaluate", "-f", str(EXAMPLE), "-o", "json")
    positional = gpuguard("evaluate", str(EXAMPLE), "-o", "json")
    assert by_f.returncode == 0 and by_f.stdout == positional.stdout
    stdin = gpuguard("evaluate", "-f", "-", "-o", "json", stdin=EXAMPLE.read_text())
    assert [r["allowed"] for r in json.loads(stdin.stdout)] == [False, True]
    both = gpuguard("audit", "-f", str(DENIED), "--filename", str(M / "training"), "-o", "json")
    sources = {r["source"] for r in json.loads(both.stdout)["results"]}
    assert str(DENIED) in sources and str(CHANGED) in sources
    twice = gpuguard("audit", "-", "-f", "-", stdin=DENIED.read_text())
    assert twice.returncode == 2 and "- (stdin) can be given once" in twice.stderr
    nothing = gpuguard("evaluate")
    assert nothing.returncode == 2 and "nothing to evaluate" in nothing.stderr and "Traceback" not in nothing.stderr


def test_fix_filename_and_quiet(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(DENIED.read_text())
    proc = gpuguard("fix", "-f", str(job), "-q")
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", "")  # still denied: checkpoint-volume
    assert "priorityClassName: training-standard" in job.read_text()  # written all the same
    loud = gpuguard("fix", "--filename", str(job))
    assert loud.returncode == 1 and "DENIED" in loud.stdout and "checkpoint-volume" in loud.stdout
    piped = gpuguard("fix", "-f", "-", "-q", stdin=DENIED.read_text())
    assert piped.returncode == 1 and "priorityClassName: training-standard" in piped.stdout and piped.stderr == ""


def test_quiet_evaluate_keeps_the_exit_code() -> None:
    proc = gpuguard("evaluate", str(EXAMPLE), "-q", "--fail-on-deny")
    assert (proc.returncode, proc.stdout) == (1, "")


# ---------------------------------------------------------------- whole lines in a pipe


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line.strip() for line in proc.stdout.splitlines()]


def test_policies_and_explain_keep_each_line_whole_in_a_pipe() -> None:
    from gpuguard.webhook.catalog import load_catalog

    catalog = load_catalog()
    policies = gpuguard("policies")
    assert policies.returncode == 0
    for info in catalog.values():  # a row is one line: id to the end of what it does
        assert any(line.startswith(info.id) and line.endswith(info.one_line) for line in _lines(policies)), info.id
    info = catalog["job-ttl"]
    explain = gpuguard("explain", "job-ttl")
    assert len(info.description) > 200 and info.description in _lines(explain)
    assert not any(line != line.rstrip() for line in explain.stdout.splitlines())  # no cell padding left


def test_audit_table_keeps_messages_whole_in_a_pipe() -> None:
    [result] = json.loads(gpuguard("audit", str(DENIED), "-o", "json").stdout)["results"]
    fixes = [v["fix"] for v in result["violations"] if len(v.get("fix") or "") > 150]
    assert fixes, "a finding with a long fix: what a terminal width would wrap"
    proc = gpuguard("audit", str(DENIED))
    assert proc.returncode == 1 and all(f"fix: {fix}" in _lines(proc) for fix in fixes)


def test_evaluate_text_keeps_messages_whole_in_a_pipe() -> None:
    proc = gpuguard("evaluate", str(DENIED))
    checkpoint = next(line for line in _lines(proc) if line.startswith("DENY  [checkpoint-volume]"))
    assert len(checkpoint) > 200 and checkpoint.endswith(".")


def test_test_verb_keeps_long_descriptions_whole_in_a_pipe(tmp_path: Path) -> None:
    import shutil

    import yaml

    suite = tmp_path / "suite"
    shutil.copytree(REPO / "tests" / "kinds" / "job", suite / "job")
    for name in ("config.yaml", "suite.yaml"):
        shutil.copy(REPO / "tests" / "kinds" / name, suite / name)
    expect = suite / "job" / "denied" / "expect.yaml"
    data = yaml.safe_load(expect.read_text())
    data["description"] = "a description longer than any terminal: " + "word " * 60 + "end"
    expect.write_text(yaml.safe_dump(data))
    proc = gpuguard("test", str(suite))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.endswith(data["description"]) for line in _lines(proc))
