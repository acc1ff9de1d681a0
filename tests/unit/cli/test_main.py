"""The ``gpuguard`` entry point: the verb table, and start-up that loads only the chosen verb.

``--help``, ``--version`` and ``VERB --help`` run on every pre-commit hook and CI step, so
each is run in a fresh interpreter here and its ``sys.modules`` is checked: none may load the
server (FastAPI, Starlette, uvicorn), the kubernetes client, CEL, pydantic or the engine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from gpuguard.webhook import __version__
from gpuguard.webhook.exitcodes import ExitCode
from gpuguard.webhook.main import VERBS, build_parser, chosen_verb, main
from tests.support.paths import REPO

# Top-level names (a module and everything under it) that a start-up must not import.
FORBIDDEN = ("fastapi", "starlette", "uvicorn", "kubernetes", "cel_expr_python", "pydantic",
             "gpuguard.webhook.engine", "gpuguard.webhook.config", "gpuguard.webhook.server.app",
             "gpuguard.kubeapi.client")

# Runs the entry point as the console script does, then prints the modules it loaded as JSON.
_WRAPPER = """
import json, sys
from gpuguard.webhook.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _start(*argv: str) -> tuple[int, str, set[str]]:
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    output, _, report = proc.stdout.rstrip("\n").rpartition("\n")
    data = json.loads(report)
    return data["code"], output, set(data["modules"])


def _forbidden(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))


@pytest.mark.parametrize("argv", [("--help",), ("--version",), *((verb, "--help") for verb in VERBS)],
                         ids=lambda argv: " ".join(argv))
def test_help_and_version_load_no_server_cluster_cel_or_engine(argv: tuple[str, ...]) -> None:
    code, output, modules = _start(*argv)
    assert code == 0
    assert output.strip(), "printed nothing"
    assert _forbidden(modules) == []


def test_top_level_help_imports_no_verb_module() -> None:
    _code, output, modules = _start("--help")
    assert not {entry.module for entry in VERBS.values()} & modules
    words = " ".join(output.split())  # argparse wraps long help lines
    for verb, entry in VERBS.items():
        assert f"{verb} {entry.help}" in words


def test_a_verb_loads_its_own_module_only() -> None:
    _code, _output, modules = _start("evaluate", "--help")
    others = {entry.module for verb, entry in VERBS.items() if verb != "evaluate"}
    assert "gpuguard.webhook.cli.evaluate" in modules and not others & modules


def test_python_dash_m_runs_the_same_entry_point() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpuguard.webhook", "--version"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith(f"gpuguard {__version__} (commit ")


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_has_a_module_that_registers_it(verb: str) -> None:
    module = importlib.import_module(VERBS[verb].module)
    parser = argparse.ArgumentParser(prog="gpuguard")
    subparsers = parser.add_subparsers(dest="command")
    module.register(subparsers)
    assert verb in subparsers.choices
    assert subparsers.choices[verb].get_default("func") is not None


def test_the_whole_parser_has_every_verb_with_its_flags() -> None:
    parser = build_parser()
    verbs = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert list(verbs) == list(VERBS)
    assert all(verbs[v].get_default("func") is not None for v in VERBS)


@pytest.mark.parametrize(("argv", "verb"), [
    (["--help"], None), (["--version"], None), (["evaluate", "x.yaml"], "evaluate"),
    (["-h", "audit", "--cluster"], "audit"), ([], None),
])
def test_the_verb_is_the_first_word_that_is_not_a_flag(argv: list[str], verb: str | None) -> None:
    assert chosen_verb(argv) == verb


def test_no_verb_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == ExitCode.USAGE
    assert "evaluate" in capsys.readouterr().out


def test_an_unknown_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["evalute"])
    assert exc.value.code == ExitCode.USAGE
    assert "invalid choice: 'evalute'" in capsys.readouterr().err


def test_exit_codes_are_the_documented_numbers() -> None:
    assert (ExitCode.OK, ExitCode.FINDINGS, ExitCode.USAGE) == (0, 1, 2)


@pytest.mark.parametrize("verb", ["evaluate", "audit", "fix"])
def test_a_config_without_custom_rules_never_loads_cel(verb: str, tmp_path) -> None:
    """CEL (``cel_expr_python``, ~16 MiB and a tenth of a second) is for admins' own rules only (issue 33)."""
    manifest = tmp_path / "job.yaml"
    manifest.write_text("apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template:\n    spec:\n"
                        "      restartPolicy: Never\n      containers:\n      - name: t\n        image: t:1\n"
                        "        resources: {limits: {nvidia.com/gpu: 1}}\n")
    args = (verb, str(manifest), "--stdout") if verb == "fix" else (verb, str(manifest))
    proc = subprocess.run([sys.executable, "-c", _WRAPPER, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    report = json.loads(proc.stdout.rstrip("\n").rpartition("\n")[2])
    assert "gpuguard.webhook.engine.core" in report["modules"], proc.stderr  # it did judge the manifest
    assert not [m for m in report["modules"] if m == "cel_expr_python" or m.startswith("cel_expr_python.")]
