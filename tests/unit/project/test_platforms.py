"""gpuguard installs from wheels alone on linux/amd64 and linux/arm64: the image builds for both.

Why a resolution test: a dependency with no wheel for one architecture (or only an sdist that
needs a compiler the slim image lacks) breaks the arm64 image or an ARM host's ``pip install``,
and nothing else in the suite runs on that architecture.  Here pip resolves what the image
installs, the lock's runtime set with its hashes (``requirements/runtime.txt``, written by
``python3 scripts/lock.py``; ``--require-hashes``, as the Dockerfile runs it), for CPython 3.11 on
each Linux architecture with ``--only-binary=:all:`` (``pip install --dry-run --report``), against
the package index, without installing anything: every locked version has a wheel, with a locked
hash, on both.  The two architectures resolve in parallel (about 30 s on a cold cache); a
resolution is kept for the day in ``~/.cache/gpuguard-e2e/platforms`` under the hash of what was
asked (the lock file, Python, tags), so a second run that day reads it back instead of asking the
index again; any change to the lock asks again.

The platform floor is glibc 2.28 (``manylinux_2_28``), on both architectures: ``cel-expr-python``
(the CEL runtime of ``customPolicies``, chosen in ``bench/README.md``) publishes
``manylinux_2_28`` wheels for x86_64 and aarch64 and nothing older; every other dependency also
has ``manylinux2014`` (glibc 2.17) wheels.  The image's base (Debian, glibc 2.36+) is above the
floor; so are the ARM hosts gpuguard targets (Ubuntu 20.04+, RHEL 8+, Amazon Linux 2023).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parents[3]
LOCK = ROOT / "requirements" / "runtime.txt"
#: Docker platform -> the wheel architecture of its manylinux tags.
ARCHITECTURES = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
GLIBC_FLOOR = (2, 28)
PYTHON = "3.11"


def runtime_requirements() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def platform_tags(arch: str) -> list[str]:
    """Every manylinux tag a glibc-2.28 machine of ``arch`` accepts (pip does not expand them itself)."""
    return [f"manylinux2014_{arch}"] + [f"manylinux_2_{minor}_{arch}" for minor in range(17, GLIBC_FLOOR[1] + 1)]


def cache_dir() -> Path:
    """Today's folder for this exact question (see the module docstring)."""
    question = json.dumps([LOCK.read_text(), PYTHON, {a: platform_tags(a) for a in ARCHITECTURES.values()}])
    key = hashlib.sha256(question.encode()).hexdigest()[:16]
    root = Path(os.environ.get("GPUGUARD_E2E_CACHE", Path.home() / ".cache" / "gpuguard-e2e"))
    return root / "platforms" / f"{datetime.date.today().isoformat()}-{key}"


def resolve_all(tmp_path: Path) -> dict[str, dict]:
    """pip's install report for every architecture (run in parallel), or the test fails with pip's words."""
    cached = cache_dir()
    if all((cached / f"{arch}.json").is_file() for arch in ARCHITECTURES.values()):
        return {p: json.loads((cached / f"{arch}.json").read_text()) for p, arch in ARCHITECTURES.items()}
    runs = {}
    for docker_platform, arch in ARCHITECTURES.items():
        report = tmp_path / f"{arch}.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--disable-pip-version-check", "--only-binary=:all:", "--python-version", PYTHON,
                   "--implementation", "cp", "--abi", "cp" + PYTHON.replace(".", ""),
                   *(arg for tag in platform_tags(arch) for arg in ("--platform", tag)),
                   "--target", str(tmp_path / f"target-{arch}"), "--report", str(report),
                   "--require-hashes", "-r", str(LOCK)]
        runs[docker_platform] = (report, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                          text=True))
    out = {}
    for docker_platform, (report, process) in runs.items():
        stdout, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, f"{docker_platform}: no wheel-only resolution:\n{stdout}\n{stderr}"
        out[docker_platform] = json.loads(report.read_text())
    cached.mkdir(parents=True, exist_ok=True)
    for docker_platform, arch in ARCHITECTURES.items():
        (cached / f"{arch}.json").write_text(json.dumps(out[docker_platform]))
    return out


def wheel_fits(filename: str, arch: str) -> bool:
    """A pure wheel, or a CPython 3.11 / abi3 wheel for ``arch`` at or below the glibc floor."""
    _, _, _, tags = parse_wheel_filename(filename)
    accepted = set(platform_tags(arch)) | {"any"}
    return any(tag.platform in accepted
               and (tag.interpreter in ("py3", "cp311") or (tag.abi == "abi3" and tag.interpreter.startswith("cp3")))
               for tag in tags)


def test_every_runtime_dependency_installs_from_wheels_on_amd64_and_arm64(tmp_path):
    reports = resolve_all(tmp_path)
    wanted = {canonicalize_name(Requirement(r).name) for r in runtime_requirements()}
    versions = {}
    for docker_platform, report in reports.items():
        arch = ARCHITECTURES[docker_platform]
        installs = report["install"]
        names = {canonicalize_name(item["metadata"]["name"]) for item in installs}
        assert wanted <= names, f"{docker_platform}: not resolved: {sorted(wanted - names)}"
        files = [item["download_info"]["url"].rsplit("/", 1)[-1] for item in installs]
        not_wheels = [f for f in files if not f.endswith(".whl")]
        assert not not_wheels, f"{docker_platform}: would build from source: {not_wheels}"
        misfits = [f for f in files if not wheel_fits(f, arch)]
        assert not misfits, f"{docker_platform}: wheels for another platform: {misfits}"
        versions[docker_platform] = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
                                     for i in installs}
    # The same release of every package on both, the locked one: no architecture silently falls back to
    # an older version because the locked one has no wheel for it.
    assert versions["linux/amd64"] == versions["linux/arm64"]
    locked = dict(re.findall(r"^([a-z0-9-]+)==(\S+)", LOCK.read_text(), re.M))
    assert {name: locked.get(name) for name in versions["linux/arm64"]} == versions["linux/arm64"]
    # Native code really is per architecture (the CEL runtime among it): the check above is not vacuous.
    native = [i["download_info"]["url"] for i in reports["linux/arm64"]["install"]
              if i["metadata"]["name"] == "cel-expr-python"]
    assert native and "aarch64" in native[0]


def test_platform_tags_stop_at_the_floor():
    """The floor is one number: a wheel needing a newer glibc than 2.28 is refused."""
    assert platform_tags("aarch64")[-1] == "manylinux_2_28_aarch64"
    assert not wheel_fits("x-1.0-cp311-cp311-manylinux_2_34_aarch64.whl", "aarch64")
    assert not wheel_fits("x-1.0-cp311-cp311-manylinux2014_x86_64.whl", "aarch64")
    assert wheel_fits("x-1.0-cp311-abi3-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", "aarch64")
    assert wheel_fits("x-1.0-py3-none-any.whl", "x86_64")
