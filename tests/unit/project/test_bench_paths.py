"""The benchmark drivers' ``--check-paths`` (bench/_paths.py), run by ``bench/smoke.py`` in scripts/test.sh.

Why tested: the peer benchmark (``bench/apiserver.py --peers``: Kyverno, MAP+VAP) needs a control
plane and a Kyverno build, so nothing ran it and a package rename broke it unseen (issue 38: the
CRD folder ``policies.kyverno.io`` became ``gpuguard.policies.kyverno.io``).  The smoke run must
pass on this tree and fail, naming what is missing, on a tree where a path a driver names is gone:
shown here on a copy of bench/ (the rest of the checkout linked in) with one thing broken.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

KYVERNO_VERSION = "v1.15.2"  # bench/peers/kyverno_proc.py's default


def _run(root: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "bench" / argv[0]), *argv[1:]], cwd=root, capture_output=True,
                          text=True, timeout=300, check=False, env={**os.environ, **(env or {})})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A checkout whose bench/ is a copy (to break) and whose other top-level entries link to this one."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copytree(REPO / "bench", root / "bench", ignore=shutil.ignore_patterns("__pycache__", ".build"))
    for entry in REPO.iterdir():
        if entry.name not in ("bench", ".git"):
            (root / entry.name).symlink_to(entry)
    return root


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} no longer holds {old!r}: update this test"
    path.write_text(text.replace(old, new, 1))


def test_the_smoke_path_check_passes_on_this_tree_and_starts_every_driver() -> None:
    proc = _run(REPO, "smoke.py", "--check-paths")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for argv in ("apiserver.py --check-paths", "apiserver.py --peers --quick --check-paths",
                 "peers/apiserver_peers.py --check-paths", "peers/kyverno_check.py --check-paths",
                 "cli_compare.py --check-paths", "_serve.py serve --help"):
        assert f"bench smoke: {argv} " in proc.stdout, f"smoke did not start {argv}:\n{proc.stdout}"


def test_the_smoke_run_fails_naming_the_folder_when_one_a_peer_driver_names_is_renamed(tree: Path) -> None:
    (tree / "bench" / "peers" / "kyverno").rename(tree / "bench" / "peers" / "kyverno-policies")
    proc = _run(tree, "smoke.py", "--check-paths")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bench/peers/kyverno_proc.py: NEEDS bench/peers/kyverno: no such file or folder" in proc.stderr
    for driver in ("peers/apiserver_peers.py", "peers/kyverno_check.py", "cli_compare.py", "apiserver.py --peers"):
        assert f"{driver}" in proc.stderr.split("FAILED:", 1)[1], f"{driver} should fail:\n{proc.stderr}"
    assert "bench smoke: engine.py --check-paths " in proc.stdout  # the others still ran, and passed
    assert "FAILED: engine.py" not in proc.stderr


def test_the_issue_38_crd_folder_fails_without_kyverno_downloaded(tree: Path, tmp_path: Path) -> None:
    """The exact break of issue 38, caught offline: a Kyverno folder name may never name gpuguard."""
    _edit(tree / "bench" / "peers" / "kyverno_proc.py", '"kyverno", "policies.kyverno.io"',
          '"kyverno", "gpuguard.policies.kyverno.io"')
    empty = tmp_path / "gomodcache"
    empty.mkdir()
    proc = _run(tree, "apiserver.py", "--peers", "--check-paths", env={"GOMODCACHE": str(empty),
                                                                       "KYVERNO_VERSION": KYVERNO_VERSION})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "EXTERNAL_NAMES 'gpuguard.policies.kyverno.io' names gpuguard" in proc.stderr
    assert "not downloaded" in proc.stdout


@pytest.mark.parametrize("folders, missing", [
    (("kyverno", "policies.kyverno.io", "reports", "policyreport"), None),
    (("kyverno", "reports", "policyreport"), "policies.kyverno.io"),
])
def test_the_crd_folders_are_checked_in_kyvernos_module_when_it_is_downloaded(
        tmp_path: Path, folders: tuple[str, ...], missing: str | None) -> None:
    crds = tmp_path / "github.com" / "kyverno" / f"kyverno@{KYVERNO_VERSION}" / "config" / "crds"
    for folder in folders:
        (crds / folder).mkdir(parents=True)
    proc = _run(REPO, "peers/kyverno_check.py", "--check-paths",
                env={"GOMODCACHE": str(tmp_path), "KYVERNO_VERSION": KYVERNO_VERSION})
    if missing is None:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"CRD_GROUPS: '{missing}': no folder {crds / missing}" in proc.stderr


def test_a_late_import_of_a_moved_module_fails(tree: Path) -> None:
    """The control plane moved once (tests/e2e/cluster -> tests/support/cluster); it is imported in main()."""
    _edit(tree / "bench" / "peers" / "apiserver_peers.py", "from tests.support.cluster.controlplane import",
          "from tests.e2e.cluster.controlplane import")
    proc = _run(tree, "peers/apiserver_peers.py", "--check-paths")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bench/peers/apiserver_peers.py: imports tests.e2e.cluster.controlplane:" in proc.stderr


def test_an_undeclared_path_constant_fails(tree: Path) -> None:
    """A new module-level path must be declared (NEEDS or MADE), so that it is checked from then on."""
    with (tree / "bench" / "peers" / "map_vap.py").open("a") as f:
        f.write('\nfrom pathlib import Path\n\nEXTRA = Path(__file__).resolve().parent / "map-vap.yaml"\n')
    proc = _run(tree, "peers/apiserver_peers.py", "--check-paths")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bench/peers/map_vap.py: EXTRA = bench/peers/map-vap.yaml is in neither NEEDS nor MADE" in proc.stderr


def test_a_new_driver_without_the_check_and_a_module_no_driver_loads_fail_the_smoke_run(tree: Path) -> None:
    (tree / "bench" / "peers" / "newpeer.py").write_text(
        "import argparse\nimport sys\n\n\ndef main() -> int:\n    argparse.ArgumentParser().parse_args()\n"
        "    return 0\n\n\nif __name__ == \"__main__\":\n    sys.exit(main())\n")
    (tree / "bench" / "peers" / "helper.py").write_text('"""Imported by nothing yet."""\n')
    proc = _run(tree, "smoke.py", "--check-paths")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "bench smoke: peers/newpeer.py --check-paths" in proc.stdout
    assert "unrecognized arguments: --check-paths" in proc.stderr
    assert "loaded bench/peers/helper.py" in proc.stderr
