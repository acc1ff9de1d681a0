"""gpuguard: a Kubernetes admission webhook that keeps ML workloads from burning GPU budget.

The version has one source, ``version`` in ``pyproject.toml``, read back from the installed
distribution's metadata (``__version__``, looked up on first use so that a command that never
shows it never pays for ``importlib.metadata``).  The commit it was built from (``commit()``,
shown by ``gpuguard --version``) is stamped into ``BUILD_COMMIT`` below by the image build and the
release workflow (``sed`` on that exact line; ``tests/unit/project/test_version.py`` keeps the
line as they expect it); in a git checkout it is asked of git; otherwise it is ``unknown``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

BUILD_COMMIT = None

#: What is shown when the version or the commit cannot be found (not installed, not a checkout).
UNKNOWN = "unknown"


@cache
def version() -> str:
    """The installed distribution's version (``pyproject.toml``'s ``version``)."""
    from importlib import metadata

    try:
        return metadata.version("gpuguard")
    except metadata.PackageNotFoundError:
        return UNKNOWN


@cache
def commit() -> str:
    """The commit gpuguard was built from: stamped at build time, else git's HEAD in a checkout."""
    if BUILD_COMMIT:
        return BUILD_COMMIT
    checkout = Path(__file__).resolve().parent.parent
    if not (checkout / ".git").exists() or not (checkout / "pyproject.toml").is_file():
        return UNKNOWN
    import subprocess

    try:
        proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    head = proc.stdout.strip()
    return head if proc.returncode == 0 and head else UNKNOWN


def __getattr__(name: str) -> str:
    if name == "__version__":
        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
