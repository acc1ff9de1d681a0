#!/usr/bin/env bash
# Build `actionlint` from the Go module proxy into the e2e cache, as tests/support/cluster/build.sh
# builds the control plane: tests/unit/project/test_workflows.py lints .github/workflows with the
# real linter (it also runs shellcheck on `run:` steps when shellcheck is on PATH), and no prebuilt
# binary can be downloaded here.
#
# `go install github.com/rhysd/actionlint/cmd/actionlint@VERSION` works as is (no replace
# directives).  CGO off: a static binary.
#
# Debian's shellcheck is installed beside it when missing and this runs as root: actionlint runs
# it on every `run:` script when it is on PATH, and the test requires it.
#
# Idempotent: exits at once when $CACHE/actionlint-$ACTIONLINT_VERSION/actionlint exists.
#
# Env:
#   ACTIONLINT_VERSION   actionlint release (default v1.7.12, served by the module proxy here)
#   GPUGUARD_E2E_CACHE   cache root (default $HOME/.cache/gpuguard-e2e)
set -euo pipefail

ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
CACHE_ROOT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}"
OUT="$CACHE_ROOT/actionlint-$ACTIONLINT_VERSION"

log() { printf '[gpuguard actionlint build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

if ! command -v shellcheck >/dev/null && [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    log "installing shellcheck with apt-get"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends shellcheck >/dev/null \
        || die "apt-get install shellcheck failed"
fi

if [[ -x "$OUT/actionlint" ]]; then
    log "actionlint cached in $OUT; nothing to do"
    exit 0
fi

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || die "go not found on PATH"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-buildvcs=false"

start=$SECONDS
mkdir -p "$OUT.tmp"
GOBIN="$OUT.tmp" go install -ldflags "-s -w -X github.com/rhysd/actionlint.version=$ACTIONLINT_VERSION" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" \
    || die "go install github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION failed"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "built actionlint $ACTIONLINT_VERSION into $OUT in $((SECONDS - start)) s"
