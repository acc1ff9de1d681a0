"""What every ``gpuguard`` sub-command shares: one error line instead of a traceback.

Users see ``gpuguard: error: <what and what to do>`` on stderr and exit 2
(``ExitCode.USAGE``), never a Python traceback (``GPUGUARD_DEBUG=1`` re-raises, for bug
reports).  Wrap a sub-command's function with ``guard`` when registering it.  Stdlib-only, so
a verb module can import it at its top without slowing ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuguard.webhook.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpuguard.webhook.config import Config


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


def error(message: str) -> None:
    print(f"gpuguard: error: {message}", file=sys.stderr)


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
