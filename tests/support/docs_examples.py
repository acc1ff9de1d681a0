"""Reading the command examples and finding samples out of README.md and docs/.

The docs show commands and what they print; users copy both.  ``tests/unit/project/test_docs_examples.py``
runs the commands that run offline and compares what they print with what the docs show, so a
renamed flag or a reworded message breaks the suite instead of the reader.  This module only
*reads* the Markdown: which blocks hold commands, which commands can run here, what output the
docs promise, and which inline samples quote a finding.

Conventions the docs follow (docs/contributing.md, "Docs that are tested"):

* A ```` ```console ```` block shows commands after ``$ `` and, under each, what it prints.  A line
  that is only ``…`` stands for any number of lines; ``…`` inside a line for any text.  ``$ echo $?``
  after a command shows its exit code.
* Commands in ```` ```sh ````/```` ```bash ```` blocks show no output; their gpuguard commands must
  still run (no usage error, no traceback).
* A gpuguard command that cannot run offline (it needs a cluster or files that are not in the
  repository) sits under ``<!-- docs-test: skip <reason> -->`` on the line before the fence.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.paths import REPO

SKIP_MARK = re.compile(r"<!--\s*docs-test:\s*skip\s+(?P<reason>.+?)\s*-->")
ELLIPSIS = ("…", "...")
# Verbs and flags that need a cluster, a network or a running server: never run here.
ONLINE_VERBS = frozenset({"serve"})
ONLINE_FLAGS = frozenset({"--cluster", "--lookup-cluster", "--kubeconfig", "--context", "-A", "--all-namespaces"})
ONLINE_PAIRS = frozenset({("certs", "inject")})
SHELL_SYNTAX = re.compile(r"[|<>`]|\$\(|\$\{?[A-Za-z_]|&&|;")


def doc_files() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


@dataclass
class Command:
    """One ``$ ...`` line of a console block (or one command of a sh block) and what the docs show after it."""

    doc: Path
    line: int
    text: str
    expected: list[str] = field(default_factory=list)
    exit_code: int | None = None

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def argv(self) -> list[str] | None:
        """The words of the command, without a trailing ``# comment``; None when the shell would be needed."""
        text = self.text
        if SHELL_SYNTAX.search(text.split(" #", 1)[0]):
            return None
        try:
            words = shlex.split(text, comments=True)
        except ValueError:
            return None
        return words or None

    def why_not_runnable(self) -> str | None:
        """None when this gpuguard command runs offline here, else why not."""
        words = self.argv()
        if words is None:
            return "it needs a shell (pipes, redirections, variables)"
        if words[0] != "gpuguard":
            return f"it runs {words[0]}, not gpuguard"
        if any(w in ELLIPSIS or "…" in w or (w.startswith("[") and w.endswith("]")) or w.startswith("<")
               for w in words[1:]):
            return "it has placeholders"
        if len(words) > 1 and words[1] in ONLINE_VERBS:
            return f"gpuguard {words[1]} runs a server"
        if tuple(words[1:3]) in ONLINE_PAIRS:
            return f"gpuguard {' '.join(words[1:3])} needs a cluster"
        online = ONLINE_FLAGS.intersection(words)
        if online:
            return f"{sorted(online)[0]} needs a cluster"
        missing = [w for w in words[2:] if _looks_like_path(w) and not (REPO / w).exists()]
        if missing:
            return f"{missing[0]} is not in the repository"
        return None

    def repo_paths(self) -> list[str]:
        """The arguments that name files or folders of the repository (copied next to the run)."""
        return [w for w in (self.argv() or [])[1:] if _looks_like_path(w) and (REPO / w).exists()]


def _looks_like_path(word: str) -> bool:
    if word.startswith("-") or "=" in word:
        return False
    return "/" in word or word.endswith((".yaml", ".yml", ".json"))


@dataclass
class Block:
    """One fenced block: its info string, where it starts, its lines, and a skip mark before it."""

    doc: Path
    line: int
    info: str
    lines: list[str]
    skip_reason: str | None

    def commands(self) -> list[Command]:
        """The commands of the block, each with the output lines the docs show under it."""
        if self.info == "console":
            return self._console_commands()
        if self.info in ("sh", "bash", "shell"):
            return self._shell_commands()
        return []

    def _console_commands(self) -> list[Command]:
        commands: list[Command] = []
        for offset, text in enumerate(self.lines):
            number = self.line + 1 + offset
            if text.startswith("$ "):
                if text.strip() == "$ echo $?" and commands:
                    commands[-1].exit_code = -1  # filled by the next line
                    continue
                commands.append(Command(self.doc, number, text[2:].strip()))
            elif commands and commands[-1].exit_code == -1:
                commands[-1].exit_code = int(text.strip())
            elif commands:
                commands[-1].expected.append(text.rstrip())
        return commands

    def _shell_commands(self) -> list[Command]:
        commands = []
        logical = ""
        start = 0
        for offset, text in enumerate(self.lines):
            if not logical:
                start = self.line + 1 + offset
            logical += text.rstrip()
            if logical.endswith("\\"):
                logical = logical[:-1] + " "
                continue
            for part in re.split(r"\s*(?:&&|;)\s*", logical.strip()):
                if part.startswith("gpuguard ") or part == "gpuguard":
                    commands.append(Command(self.doc, start, part))
            logical = ""
        return commands


def blocks(doc: Path) -> Iterator[Block]:
    """Every fenced block of ``doc`` with the skip mark on the nearest non-blank line before it."""
    lines = doc.read_text().splitlines()
    index = 0
    while index < len(lines):
        fence = lines[index].strip()
        if fence.startswith("```"):
            info = fence[3:].strip()
            end = index + 1
            while end < len(lines) and not lines[end].strip().startswith("```"):
                end += 1
            before = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
            mark = SKIP_MARK.search(before)
            yield Block(doc, index + 1, info, lines[index + 1:end], mark.group("reason") if mark else None)
            index = end + 1
        else:
            index += 1


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` lines are what ``expected`` shows: ``…`` lines skip any lines, ``…`` in a line any text."""
    patterns = [None if line.strip() in ELLIPSIS else _line_pattern(line) for line in expected]
    actual = [line.rstrip() for line in actual]
    # positions reachable in `actual` after matching a prefix of `patterns`: linear in both
    reachable = {0}
    for pattern in patterns:
        if pattern is None:
            lowest = min(reachable, default=len(actual) + 1)
            reachable = set(range(lowest, len(actual) + 1))
        else:
            reachable = {i + 1 for i in reachable if i < len(actual) and pattern.fullmatch(actual[i])}
        if not reachable:
            return False
    return len(actual) in reachable


def _line_pattern(line: str) -> re.Pattern[str]:
    parts = re.split(r"…|\.\.\.", line.rstrip())
    return re.compile(".*".join(re.escape(p) for p in parts))


# ---------------------------------------------------------------- finding samples

INLINE_CODE = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class Sample:
    """A finding quoted in prose (``[policy] path: message; fix``), which must be one gpuguard really gives."""

    doc: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"

    def pattern(self) -> re.Pattern[str]:
        """The sample as a pattern over a real message: ``…`` for any text, a trailing ``…`` for the rest."""
        text = re.sub(r"\s+", " ", self.text.strip())
        parts = re.split(r"\s*(?:…|\.\.\.)\s*", text)
        return re.compile(r"\s*.*\s*".join(re.escape(p) for p in parts))


def finding_samples(doc: Path, policy_ids: frozenset[str]) -> Iterator[Sample]:
    """Inline code spans of ``doc`` (across line breaks of a paragraph) that quote a finding of a known policy."""
    starts = re.compile(r"\[(" + "|".join(sorted(map(re.escape, policy_ids))) + r")\] ")
    lines = doc.read_text().splitlines()
    in_fence = False
    paragraph: list[tuple[int, str]] = []

    def flush() -> Iterator[Sample]:
        text = " ".join(t.strip() for _, t in paragraph)
        for match in INLINE_CODE.finditer(text):
            found = starts.search(match.group(1))
            if found:
                line = _line_of(paragraph, text, match.start())
                yield Sample(doc, line, match.group(1)[found.start():])

    for number, text in enumerate(lines, 1):
        if text.strip().startswith("```"):
            in_fence = not in_fence
            yield from flush()
            paragraph = []
            continue
        if in_fence:
            continue
        if not text.strip():
            yield from flush()
            paragraph = []
        else:
            paragraph.append((number, text))
    yield from flush()


def _line_of(paragraph: list[tuple[int, str]], joined: str, offset: int) -> int:
    position = 0
    for number, text in paragraph:
        position += len(text.strip()) + 1
        if position > offset:
            return number
    return paragraph[-1][0] if paragraph else 0
