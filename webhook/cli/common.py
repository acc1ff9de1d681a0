"""What every ``gpuguard`` sub-command shares: one error line instead of a traceback, exit codes.

Users see ``gpuguard: error: <what and what to do>`` on stderr and exit 2, never a Python
traceback (``GPUGUARD_DEBUG=1`` re-raises, for bug reports).  Wrap a sub-command's function
with ``guard`` when registering it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable

EXIT_USAGE = 2
EXIT_ERROR = 2


class UsageError(Exception):
    """Flags that don't fit together; reported like argparse errors, exit 2."""


def error(message: str) -> None:
    print(f"gpuguard: error: {message}", file=sys.stderr)


def guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn any error into one ``gpuguard: error:`` line and exit 2, never a traceback."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except UsageError as exc:
            error(f"{exc}")
            return EXIT_USAGE
        except BrokenPipeError:  # `gpuguard audit ... | head`
            with contextlib.suppress(OSError):
                sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the interpreter's flush at exit
            return EXIT_ERROR
        except Exception as exc:
            if os.environ.get("GPUGUARD_DEBUG"):
                raise
            error(f"unexpected {type(exc).__name__}: {exc} (GPUGUARD_DEBUG=1 shows the traceback)")
            return EXIT_ERROR

    return wrapper
