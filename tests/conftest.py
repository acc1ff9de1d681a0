"""Suite-wide rules.

In CI (``CI`` set) a skipped test is a failure: the end-to-end and browser tests skip on a
developer machine without Go or Chromium, but CI installs both, so a skip there means a
missing install step, not a pass.
"""

from __future__ import annotations

import os

import pytest


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not os.environ.get("CI"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        names = ", ".join(report.nodeid for report in skipped[:10])
        print(f"\nCI: {len(skipped)} test(s) were skipped, which CI counts as failures: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
