#!/usr/bin/env bash
# Run test folders on linux/arm64 under user-mode emulation: the aarch64 wheels of every
# dependency (the CEL runtime's among them) really run, not only resolve.
#
#   bash tests/support/arm64/run.sh [PYTEST ARGS...]      (default: tests/unit/custom)
#
# How, with nothing but Debian's packages and the package index: debootstrap's first stage
# (--foreign: it only downloads and unpacks, nothing runs) lays out an arm64 Debian 12 with its
# python3.11 in $CACHE/root; pip on this machine installs the aarch64 wheels of gpuguard's
# runtime and test dependencies (--platform, --only-binary=:all:) and a wheel of the committed
# tree (git archive HEAD) into $CACHE/site; qemu-aarch64-static runs that python with the rootfs
# as its library root. Root only (apt-get, debootstrap). Not part of scripts/test.sh: a cold run
# downloads ~150 MB and takes minutes; the wheel resolution for both architectures is
# (tests/unit/project/test_platforms.py).
#
# Env: GPUGUARD_E2E_CACHE (default $HOME/.cache/gpuguard-e2e); the rootfs is kept in $CACHE/arm64/root.
set -euo pipefail
cd "$(dirname "$0")/../../.."
CACHE="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}/arm64"
ROOT="$CACHE/root"
log() { printf '[gpuguard arm64 %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [[ ${#need[@]} -gt 0 ]]; then
    log "installing ${need[*]} with apt-get"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi

if [[ ! -x "$ROOT/usr/bin/python3.11" ]]; then
    log "arm64 Debian 12 with python3.11 into $ROOT"
    rm -rf "$ROOT" && mkdir -p "$CACHE"
    debootstrap --foreign --arch=arm64 --variant=minbase \
        --include=python3.11,libstdc++6,libffi8,libssl3 bookworm "$ROOT" http://deb.debian.org/debian >/dev/null
    for deb in "$ROOT"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git archive HEAD | tar -x -C "$work"
mkdir -p "$work/wheel"
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" "$work" >/dev/null
python3 - "$work/pyproject.toml" > "$work/requirements.txt" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
tools = ("ruff", "mypy", "import-linter", "setuptools", "wheel", "types-")  # not needed to run tests
print("\n".join(project["dependencies"]))
print("\n".join(r for r in project["optional-dependencies"]["test"] if not r.startswith(tools)))
PY
log "aarch64 wheels into $work/site"
python3 -m pip install -q --disable-pip-version-check --no-warn-conflicts --root-user-action=ignore --only-binary=:all: --python-version 3.11 \
    --implementation cp --abi cp311 --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
    --target "$work/site" -c "$work/requirements/constraints.txt" -r "$work/requirements.txt" \
    "$work"/wheel/gpuguard-*.whl >/dev/null  # at the lock's versions (scripts/lock.py)

[[ $# -gt 0 ]] || set -- tests/unit/custom
log "pytest $* on $(qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" -c 'import platform; print(platform.machine())')"
cd "$work"
PYTHONPATH="$work/site:$work" PYTHONDONTWRITEBYTECODE=1 \
    qemu-aarch64-static -L "$ROOT" "$ROOT/usr/bin/python3.11" -m pytest -q -p no:cacheprovider "$@"
