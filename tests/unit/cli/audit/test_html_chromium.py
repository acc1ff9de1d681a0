"""The HTML report renders in a real browser: headless Chromium dumps its DOM and takes a screenshot.

A string test cannot tell whether a page renders; Chromium can.  The page must render with
networking off (it is self-contained), show the summary, charts and findings, and produce a
non-trivial screenshot.  Skipped only where Chromium is absent and ``CI`` is unset: CI
installs Debian's ``chromium``, so a skip there would hide a broken report.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from gpuguard.webhook.cli.audit.formats import htmlreport
from gpuguard.webhook.cli.audit.run import AuditReport
from gpuguard.webhook.manifests import load
from tests.support.paths import REPO

ROOT = REPO
MANIFESTS = ROOT / "tests" / "fixtures" / "manifests"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed in CI (apt-get install chromium)", pytrace=False)
    pytest.skip("chromium not installed (apt-get install chromium); CI runs this test")


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
            f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gpuguard.webhook.catalog import load_catalog
    from gpuguard.webhook.cli.audit.cost import Prices
    from gpuguard.webhook.cli.audit.run import evaluate_all, file_context
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.engine.core import Engine

    config = load_config(None)
    pairs = ((doc, file_context(doc.obj, "default")) for doc in load([str(MANIFESTS)]))
    items = list(evaluate_all(pairs, Engine(config).evaluate, Prices.from_config(config)))
    report = AuditReport(items, catalog=load_catalog(), sources=["tests/fixtures/manifests"])
    path = tmp_path_factory.mktemp("html") / "audit.html"
    path.write_text(htmlreport.build(report), encoding="utf-8")
    return path


def test_report_renders_in_headless_chromium(page: Path, tmp_path: Path) -> None:
    browser = _chromium()
    dom = _run(browser, tmp_path / "profile-dom", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    text = re.sub(r"\s+", " ", text)
    for expected in ("gpuguard audit report", "would be denied", "Findings by policy", "Findings by namespace",
                     "Cost at risk", "This is an estimate.", "bert-large-pretrain", "checkpoint-volume",
                     "Input errors", "broken-stream.yaml:23", "Would change"):
        assert expected in text, expected
    assert dom.stdout.count("<svg") == 2

    shot = tmp_path / "audit.png"
    result = _run(browser, tmp_path / "profile-shot", "--window-size=1280,2000", "--hide-scrollbars",
                  f"--screenshot={shot}", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists()
    assert _png_size(shot) == (1280, 2000)
    # A blank page compresses to a few KB; cards, charts and tables do not.
    assert shot.stat().st_size > 30_000
