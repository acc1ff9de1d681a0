"""The dependency lock (``requirements/``, written by ``python3 scripts/lock.py``) is current, and is what installs.

Offline: no index is asked.  The lock is current when each file's recorded input digest is that of
pyproject's requirements as they are now (a changed bound or a new dependency without a new lock
fails here), when every requirement of pyproject is pinned within its bounds, when the three files
hold the same versions (hashes only where they are checked), and when the packages installed here,
gpuguard's runtime and test dependencies followed through their own metadata, are exactly the
pinned ones and all in the lock (a transitive dependency the lock lacks means it was written for
other versions).  Then the installers must use it: the test command, the image and the release.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.paths import REPO, load_script

FIX = "run `python3 scripts/lock.py` (and `python3 -m pip install -c requirements/constraints.txt -e '.[test]'`)"


@cache
def lock_script() -> ModuleType:
    return load_script("lock")


@dataclass(frozen=True)
class Pin:
    requirement: Requirement
    hashes: tuple[str, ...]

    @property
    def version(self) -> str:
        (spec,) = self.requirement.specifier
        return spec.version

    def applies(self) -> bool:
        """Its marker holds here (``uvloop ; sys_platform != 'win32'``), or it has none."""
        return self.requirement.marker is None or self.requirement.marker.evaluate()


def entries(path: str) -> dict[str, Pin]:
    """A requirements file's entries by canonical name: continuation lines joined, comments dropped."""
    text = (REPO / path).read_text(encoding="utf-8")
    out: dict[str, Pin] = {}
    for entry in re.sub(r"\\\n\s*", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        spec, *options = (part.strip() for part in entry.split(" --"))
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name not in out, f"{path}: {name} twice"
        hashes = tuple(o.strip().removeprefix("hash=") for o in options if o.startswith("hash="))
        assert len(hashes) == len(options), f"{path}: {name}: an option other than --hash: {options}"
        out[name] = Pin(requirement, hashes)
    return out


def digest_line(path: str) -> str:
    prefix = lock_script().DIGEST_PREFIX
    lines = [line for line in (REPO / path).read_text(encoding="utf-8").splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"{path}: no {prefix!r} line"
    return lines[0].removeprefix(prefix)


def files() -> tuple[str, str, str]:
    script = lock_script()
    return script.CONSTRAINTS, script.RUNTIME, script.BUILD


# ---------------------------------------------------------------- current


def test_the_lock_was_written_for_pyprojects_requirements_as_they_are() -> None:
    script = lock_script()
    expected = script.inputs_digest(script.inputs())
    for path in files():
        assert digest_line(path) == expected, f"{path} was written for other requirements: {FIX}"


def test_every_requirement_is_pinned_exactly_and_within_its_bounds() -> None:
    script = lock_script()
    groups = script.inputs()
    constraints, runtime, build = (entries(path) for path in files())
    where = {"runtime": (constraints, runtime), "test": (constraints,), "build": (constraints, build)}
    for group, requirements in groups.items():
        for text in requirements:
            wanted = Requirement(text)
            if wanted.marker is not None and not wanted.marker.evaluate():
                continue
            for pins in where[group]:
                pin = pins.get(canonicalize_name(wanted.name))
                assert pin is not None, f"{wanted.name} ({group}) is not in the lock: {FIX}"
                assert wanted.specifier.contains(pin.version, prereleases=True), \
                    f"{wanted.name}=={pin.version} is outside pyproject's {text!r}: {FIX}"
    for path, pins in zip(files(), (constraints, runtime, build), strict=True):
        for name, pin in pins.items():
            (spec,) = pin.requirement.specifier
            assert spec.operator == "==", f"{path}: {name} is not pinned with =="


def test_the_three_files_hold_the_same_versions_and_hashes_where_they_are_checked() -> None:
    constraints, runtime, build = (entries(path) for path in files())
    assert not any(pin.hashes for pin in constraints.values()), \
        "constraints.txt has hashes: pip before 26.1 would then require a hash for the editable install"
    for path, pins in ((files()[1], runtime), (files()[2], build)):
        assert pins, path
        for name, pin in pins.items():
            assert name in constraints and constraints[name].version == pin.version, \
                f"{path}: {name}=={pin.version}, constraints.txt: {constraints.get(name)}: {FIX}"
            assert pin.hashes and all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in pin.hashes), \
                f"{path}: {name} without sha256 hashes"
    # The runtime file is the runtime set only: the image installs nothing of the tests.
    script = lock_script()
    test_only = {canonicalize_name(Requirement(r).name) for r in script.inputs()["test"]} - {
        canonicalize_name(Requirement(r).name) for r in script.inputs()["runtime"]}
    assert not test_only & set(runtime), sorted(test_only & set(runtime))


def _closure(requirements: list[str]) -> dict[str, str]:
    """Installed name -> version for ``requirements`` and everything they need here, through installed metadata."""
    environment = default_environment()
    found: dict[str, str] = {}
    missing: list[str] = []
    queue = [(Requirement(r), frozenset[str]()) for r in requirements]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        requirement, _ = queue.pop()
        name = canonicalize_name(requirement.name)
        extras = frozenset(requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
            continue
        found[name] = dist.version
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({**environment, "extra": extra})
                                            for extra in (extras or {""})):
                queue.append((needed, frozenset()))
    assert not missing, f"not installed: {sorted(set(missing))}: {FIX}"
    return found


def test_the_installed_dependencies_are_the_locked_ones() -> None:
    script = lock_script()
    groups = script.inputs()
    wanted = [r for r in groups["runtime"] + groups["test"]
              if Requirement(r).marker is None or Requirement(r).marker.evaluate()]
    installed = _closure(wanted)
    pins = {name: pin for name, pin in entries(script.CONSTRAINTS).items() if pin.applies()}
    unlocked = sorted(set(installed) - set(pins))
    assert not unlocked, f"dependencies the lock lacks (it was written for other versions): {unlocked}: {FIX}"
    differ = {name: (version, pins[name].version) for name, version in installed.items()
              if version != pins[name].version}
    assert not differ, f"installed != locked (installed, locked): {differ}: {FIX}"


# ---------------------------------------------------------------- bounds


def test_uvicorn_is_bounded_to_the_minor_series_whose_internals_gpuguard_subclasses() -> None:
    """webhook/server/protocol.py subclasses uvicorn's HttpToolsProtocol, which any minor release may change."""
    protocol = (REPO / "webhook" / "server" / "protocol.py").read_text(encoding="utf-8")
    assert "from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol" in protocol
    (uvicorn,) = [Requirement(r) for r in lock_script().inputs()["runtime"] if Requirement(r).name == "uvicorn"]
    upper = [s for s in uvicorn.specifier if s.operator == "<"]
    assert upper, "uvicorn has no upper bound"
    pinned = entries(lock_script().CONSTRAINTS)["uvicorn"].version
    major, minor = (int(part) for part in pinned.split(".")[:2])
    assert upper[0].version == f"{major}.{minor + 1}", f"uvicorn {pinned} is locked; bound it to <{major}.{minor + 1}"


# ---------------------------------------------------------------- used


def test_the_installers_use_the_lock() -> None:
    test_sh = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert "-c requirements/constraints.txt -e '.[test]'" in test_sh
    dockerfile = (REPO / "Dockerfile").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements/runtime.txt" in dockerfile
    assert "--require-hashes -r requirements/build.txt" in dockerfile and "--no-build-isolation" in dockerfile
    release = (REPO / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    assert "--require-hashes -r requirements/build.txt" in release and "--no-isolation" in release


def test_the_entry_parser_reads_what_uv_writes() -> None:
    """The reader above is not vacuous: markers, continuation lines and hashes."""
    runtime = entries(lock_script().RUNTIME)
    assert str(runtime["uvloop"].requirement.marker) == 'sys_platform != "win32"'
    assert len(runtime["cel-expr-python"].hashes) >= 2  # a wheel for each architecture at least
    assert Path(REPO / lock_script().CONSTRAINTS).read_text(encoding="utf-8").startswith("# Generated by")
