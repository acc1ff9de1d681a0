"""``gpuguard completion bash|zsh|fish``: the scripts, the answers gpuguard gives on TAB, and bash for real.

The scripts (from argcomplete) hold no verb or flag: on TAB the shell runs ``gpuguard`` with the
line being typed in ``COMP_LINE``, and gpuguard answers from its own parser.  So each shell's
script is checked for what it registers and runs, gpuguard's answer is checked in each shell's
mode (the protocol the scripts speak, without the shell), and in bash, which this machine has,
the script is sourced and the completion function run as a TAB press runs it.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuguard.webhook.cli.completion import EXECUTABLES, SHELLS
from gpuguard.webhook.main import VERBS
from tests.support.paths import REPO


def gpuguard(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuguard.webhook", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=False, env=env)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_script_registers_both_executables_and_asks_gpuguard(shell: str) -> None:
    proc = gpuguard("completion", shell)
    assert proc.returncode == 0 and proc.stderr == ""
    script = proc.stdout
    assert "_ARGCOMPLETE" in script and "COMP_LINE" in script
    for executable in EXECUTABLES:
        assert executable in script
    if shell == "fish":
        assert "complete --command gpuguard" in script and "complete --command kubectl-gpuguard" in script
    else:
        assert "complete -o nospace -o default -o bashdefault -F _python_argcomplete gpuguard kubectl-gpuguard" \
            in script and "compdef _python_argcomplete gpuguard kubectl-gpuguard" in script


def test_an_unknown_shell_is_a_usage_error() -> None:
    proc = gpuguard("completion", "tcsh")
    assert proc.returncode == 2 and "invalid choice: 'tcsh'" in proc.stderr


def _answer(shell: str, line: str, tmp_path: Path) -> list[str]:
    """What gpuguard answers when ``shell``'s script asks it to complete ``line`` (the cursor at its end)."""
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "_ARGCOMPLETE_SHELL": shell, "COMP_LINE": line,
           "COMP_POINT": str(len(line)), "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
    proc = gpuguard(env=env)
    assert proc.returncode == 0, proc.stderr
    words = out.read_text().split("\n")
    return [w.split(":", 1)[0] if shell == "zsh" else w.split("\t", 1)[0] for w in words]  # zsh: word:description


@pytest.mark.parametrize("shell", SHELLS)
def test_gpuguard_answers_each_shell_with_verbs_flags_and_formats(shell: str, tmp_path: Path) -> None:
    assert set(_answer(shell, "gpuguard ", tmp_path)) >= set(VERBS)
    assert [w.strip() for w in _answer(shell, "gpuguard au", tmp_path)] == ["audit"]
    flags = {w.strip() for w in _answer(shell, "gpuguard audit -", tmp_path)}
    assert {"-o", "--output", "-f", "--filename", "-q", "--quiet", "--output-file", "--cluster"} <= flags
    formats = [w.strip() for w in _answer(shell, "gpuguard audit -o ", tmp_path)]
    assert formats == ["table", "json", "junit", "sarif", "policyreport", "openreports", "html"]
    assert [w.strip() for w in _answer(shell, "kubectl-gpuguard evaluate --output j", tmp_path)] == ["json"]


BASH_DRIVER = r"""
set -u
source "$1"
complete -p gpuguard kubectl-gpuguard
comp() {
    COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; COMP_TYPE=9
    read -ra COMP_WORDS <<< "$COMP_LINE"
    [[ "$COMP_LINE" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=()
    _python_argcomplete "${COMP_WORDS[0]}"
    echo "[$1] ${COMPREPLY[*]}"
}
comp "gpuguard "
comp "gpuguard exp"
comp "gpuguard audit --output-f"
comp "gpuguard audit -o s"
comp "gpuguard test --output "
comp "gpuguard completion "
comp "kubectl-gpuguard webhook-config -o "
"""


def test_bash_completes_for_real(tmp_path: Path) -> None:
    script = tmp_path / "gpuguard.bash"
    script.write_text(gpuguard("completion", "bash").stdout)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in EXECUTABLES:  # the commands as installed, running this checkout
        launcher = bin_dir / name
        launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuguard.webhook "$@"\n')
        launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", BASH_DRIVER, "driver", str(script)],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("complete ") and lines[0].endswith(" gpuguard")  # registered for both names
    assert lines[1].startswith("complete ") and lines[1].endswith(" kubectl-gpuguard")
    replies = {line[1:line.index("]")]: line[line.index("]") + 2:].split() for line in lines[2:]}
    assert set(replies["gpuguard "]) >= set(VERBS)
    assert replies["gpuguard exp"] == ["explain"]
    assert replies["gpuguard audit --output-f"] == ["--output-file"]
    assert replies["gpuguard audit -o s"] == ["sarif"]
    assert replies["gpuguard test --output "] == ["table", "junit"]
    assert {"bash", "zsh", "fish"} <= set(replies["gpuguard completion "])
    assert replies["kubectl-gpuguard webhook-config -o "] == ["yaml", "json"]


@pytest.mark.parametrize(("words", "expected"), [
    (["au"], ["audit", ":4"]),
    (["evaluate", "--output", ""], ["text", "json", ":4"]),
    (["completion", "f"], ["fish", ":4"]),
    (["audit", "-f", "exam"], ["examples/", ":6"]),  # a folder: no space after it (2), no shell files (4)
])
def test_kubectl_complete_answers_kubectl_in_cobra_form(words: list[str], expected: list[str]) -> None:
    """``kubectl gpuguard <TAB>``: kubectl runs ``kubectl_complete-gpuguard WORDS…`` and reads lines + ``:directive``.

    Run as its own process, as kubectl runs it (argcomplete may open fd 9 for its debug stream).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("_ARGCOMPLETE", "COMP_"))}
    proc = subprocess.run([sys.executable, "-c", "import sys; from gpuguard.webhook.main import kubectl_complete; "
                           "sys.exit(kubectl_complete())", *words], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == expected
