"""actionlint for the workflow tests: the binary ``build.sh`` builds from the Go module proxy into the e2e cache."""

from __future__ import annotations

import shutil
import subprocess

from tests.support.gotool import GoTool
from tests.support.paths import REPO

BUILD_SCRIPT = REPO / "tests" / "support" / "actionlint" / "build.sh"


ACTIONLINT = GoTool("actionlint", "ACTIONLINT_VERSION", BUILD_SCRIPT, build_timeout=900)
actionlint_version, actionlint_path, require_actionlint = ACTIONLINT.version, ACTIONLINT.path, ACTIONLINT.require


def actionlint(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run actionlint from the repository root (it finds .github/workflows there) with shellcheck."""
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, f"shellcheck is missing: `bash {BUILD_SCRIPT}` installs it (as root)"
    return subprocess.run([str(require_actionlint()), "-no-color", "-oneline", "-shellcheck", shellcheck, *args],
                          input=stdin, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
