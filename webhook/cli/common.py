"""What every ``gpuguard`` sub-command shares: one error line instead of a traceback.

Users see ``gpuguard: error: <what and what to do>`` on stderr and exit 2
(``ExitCode.USAGE``), never a Python traceback (``GPUGUARD_DEBUG=1`` re-raises, for bug
reports).  Wrap a sub-command's function with ``guard`` when registering it.  Stdlib-only, so
a verb module can import it at its top without slowing ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from rich.console import Console

    from gpuguard.webhook.config import Config

# Off a terminal a line is as long as its text: rich needs some width, this one no text reaches.
NO_WIDTH = 100_000


class UsageError(Exception):
    """Flags that don't fit together; reported like argparse errors, exit 2."""


def load_config_or_exit(path: str | None) -> Config:
    """The config a verb runs with; a bad or unreadable file is a ``UsageError`` (one line, exit 2).

    The config room is imported here, not at the top, so that ``--help`` stays light.
    """
    from gpuguard.webhook.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None


def add_nodes_flag(parser: argparse.ArgumentParser) -> None:
    """``--nodes FILE``: decide with the cluster's nodes (docs/inventory.md), as the webhook does."""
    parser.add_argument("--nodes", metavar="FILE", help="Node and Karpenter NodePool objects (e.g. `kubectl get "
                        "nodes -o yaml`): affinity, sizing and schedulability follow them")


def with_nodes_or_exit(engine: Any, path: str | None) -> None:
    """Give ``engine`` the inventory of ``--nodes FILE``; an unreadable file is a ``UsageError``."""
    if not path:
        return
    from gpuguard.webhook.manifests import ManifestError
    from gpuguard.webhook.suite import read_nodes

    try:
        engine.set_nodes(read_nodes(path))
    except ManifestError as exc:
        raise UsageError(f"--nodes: {exc}") from None


class _FormatType:
    """``-o`` values: one of the verb's formats, else a message that says what ``-o`` takes.

    A type rather than ``choices`` so that the error can point a file name at the flag that takes one
    (``gpuguard audit -o report.json`` once wrote a file: ``--output-file`` does now).
    """

    def __init__(self, formats: Sequence[str], file_flag: str | None) -> None:
        self.formats, self.file_flag = tuple(formats), file_flag

    def __call__(self, text: str) -> str:
        if text in self.formats:
            return text
        message = f"{text!r} is not an output format; -o/--output takes one of: {', '.join(self.formats)}"
        if self.file_flag:
            message += f" (to write to a file: {self.file_flag} {text})"
        raise argparse.ArgumentTypeError(message)


def _completes(action: argparse.Action, words: Sequence[str]) -> argparse.Action:
    """Offer ``words`` to shell completion (argcomplete reads an action's ``completer``)."""
    action.completer = lambda **_: list(words)  # type: ignore[attr-defined]
    return action


def add_common_flags(parser: Any, formats: Sequence[str] = (), *, manifests: bool = False,
                     file_flag: str | None = None, quiet: str | None = None) -> None:
    """The flags verbs spell as kubectl does, added here and only here so that they mean the same everywhere.

    ``formats``: ``-o/--output FORMAT`` (``--format`` is the same flag; ``dest="format"``), default
    ``formats[0]``; ``file_flag`` names the verb's flag that writes to a file, for the error of ``-o FILE``.
    ``manifests``: ``-f/--filename PATH`` (repeatable; ``-`` for stdin), read with the verb's positional
    paths (``manifest_paths``).  ``quiet``: ``-q/--quiet``, with what it keeps for this verb as its help.
    ``parser`` may be an argument group.  docs/cli.md lists the conventions.
    """
    if formats:
        flag = parser.add_argument(
            "-o", "--output", "--format", dest="format", default=formats[0], metavar="FORMAT",
            type=_FormatType(formats, file_flag),
            help=f"output format: {', '.join(formats)} (default: {formats[0]}); --format is the same flag")
        _completes(flag, formats)
    if manifests:
        parser.add_argument("-f", "--filename", action="append", default=[], metavar="PATH", dest="filenames",
                            help="a manifest file or folder, as the positional paths (repeatable; - reads stdin)")
    if quiet:
        parser.add_argument("-q", "--quiet", action="store_true", help=quiet)


def manifest_paths(args: argparse.Namespace, positional: str) -> list[str]:
    """The positional paths then every ``-f``, in order; stdin (``-``) at most once, since it is read once."""
    from gpuguard.webhook.manifests import STDIN

    paths = [*(getattr(args, positional) or []), *getattr(args, "filenames", [])]
    if paths.count(STDIN) > 1:
        raise UsageError("- (stdin) can be given once")
    return paths


def whole_line_console(stream: TextIO | None = None) -> Console:
    """A rich console for ``stream`` (stdout): the terminal's width on a terminal, else no width at all.

    In a pipe, a file or a CI log a line is never wrapped or cropped at some guessed width (``| grep`` finds
    what it looks for); print with ``print_whole`` so that the padding rich adds to table cells is dropped.
    """
    from rich.console import Console

    stream = stream or sys.stdout
    tty = stream.isatty()
    return Console(file=stream if tty else io.StringIO(), highlight=False,
                   no_color=not tty or bool(os.environ.get("NO_COLOR")), width=None if tty else NO_WIDTH,
                   force_terminal=tty or None)


def print_whole(console: Console, *renderables: Any, stream: TextIO | None = None, **kwargs: Any) -> None:
    """``console.print`` for a ``whole_line_console``: off a terminal, written with trailing blanks dropped."""
    console.print(*renderables, **kwargs)
    buffer = console.file
    if isinstance(buffer, io.StringIO):
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        (stream or sys.stdout).write("".join(line.rstrip() + "\n" for line in text.splitlines()))


# The command as the user typed it: ``kubectl gpuguard`` when kubectl runs the plugin, so that its error lines
# name what docs/cli.md names (set once by ``gpuguard.webhook.main.main``).
_program = ["gpuguard"]


def set_program(name: str) -> None:
    """Name the command in every error and note line of this process (``gpuguard`` or ``kubectl gpuguard``)."""
    _program[0] = name


def program() -> str:
    """The command's name as typed: the prefix of every ``error``/``note`` line."""
    return _program[0]


def error(message: str) -> None:
    print(f"{program()}: error: {message}", file=sys.stderr)


def note(message: str) -> None:
    """A line on stderr that is not an error (what was skipped, what a default means)."""
    print(f"{program()}: {message}", file=sys.stderr)


def guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn any error into one ``gpuguard: error:`` line and exit 2, never a traceback."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except UsageError as exc:
            error(f"{exc}")
            return ExitCode.USAGE
        except BrokenPipeError:  # `gpuguard audit ... | head`
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the interpreter's flush at exit
            return ExitCode.USAGE
        except Exception as exc:
            if os.environ.get("GPUGUARD_DEBUG"):
                raise
            error(f"unexpected {type(exc).__name__}: {exc} (GPUGUARD_DEBUG=1 shows the traceback)")
            return ExitCode.USAGE

    return wrapper
