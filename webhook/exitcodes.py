"""The exit codes of every ``gpuguard`` command, defined once so scripts and CI can rely on them.

One rule for every verb: 0 when nothing is wrong, 1 when the command ran and found something
to act on (a denied workload, a failing case), 2 when it could not do its job (bad flags,
unreadable input, a broken config, an unreachable cluster).  2 wins over 1: a run that could
not read everything must not pass as merely "has findings".  Bottom-level and stdlib-only, so
``gpuguard.certs`` and the CLI can both import it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What ``gpuguard VERB`` returns to its shell."""

    OK = 0
    FINDINGS = 1  # denied, failing, findings at or above --fail-on
    USAGE = 2  # usage and input errors: flags, files, config, cluster
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
