#!/usr/bin/env bash
# Build Kyverno v1.15.2 (the kubectl-kyverno CLI and the admission controller) from the Go module
# proxy into a cache outside the repo, for bench/apiserver.py's `kyverno` scenario and
# bench/cli_compare.py.  Never part of the default test run: a cold build took 22 min on a busy 2-core machine
# and grows the Go caches by ~4 GB.
#
# Why a wrapper module: `go install github.com/kyverno/kyverno/...@v1.15.2` is refused because
# Kyverno's go.mod has a `replace` line (k8s.io/pod-security-admission => a Kyverno fork).  As
# tests/support/cluster/build.sh does for Kubernetes, we create a throw-away module that requires
# Kyverno and repeats its replace line.  The checksum database answers 404 for one dependency
# (github.com/openreports/reports-api), so Kyverno's own go.sum is appended to the wrapper's.
#
# Idempotent: exits at once when both binaries are cached.  Exit code 3 (and a clear message)
# when Go is missing, so callers can skip the Kyverno scenario rather than fail.
#
# Env:
#   KYVERNO_VERSION         default v1.15.2 (built on k8s.io v0.33, matching the e2e apiserver 1.33)
#   GPUGUARD_PEERS_CACHE    cache root (default $HOME/.cache/gpuguard-peers); binaries in
#                           $CACHE/kyverno-$KYVERNO_VERSION/{kubectl-kyverno,kyverno}
#   KYVERNO_CLI_ONLY        1: build only the CLI
set -euo pipefail

KYVERNO_VERSION="${KYVERNO_VERSION:-v1.15.2}"
CACHE_ROOT="${GPUGUARD_PEERS_CACHE:-$HOME/.cache/gpuguard-peers}"
OUT="$CACHE_ROOT/kyverno-$KYVERNO_VERSION"
WRAP="$OUT/wrapper"

log() { printf '[kyverno build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

have() {
    [[ -x "$OUT/kubectl-kyverno" ]] || return 1
    [[ "${KYVERNO_CLI_ONLY:-0}" == 1 ]] || [[ -x "$OUT/kyverno" ]]
}
if have; then
    log "binaries cached in $OUT; nothing to do"
    exit 0
fi

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
if ! command -v go >/dev/null; then
    log "SKIP: go not found on PATH (need Go >= 1.24 to build Kyverno $KYVERNO_VERSION); the Kyverno comparison is unavailable"
    exit 3
fi

export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod -buildvcs=false ${GOFLAGS_EXTRA:-}"
mkdir -p "$OUT" "$WRAP"

log "downloading github.com/kyverno/kyverno@$KYVERNO_VERSION (go.mod, go.sum)"
json="$(go mod download -json "github.com/kyverno/kyverno@$KYVERNO_VERSION")" || die "go mod download failed"
dir="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' | head -1)"
[[ -f "$dir/go.mod" ]] || die "could not find the module directory in: $json"

if [[ ! -f "$WRAP/.resolved" ]]; then
    godirective="$(grep -E '^go [0-9]' "$dir/go.mod" | head -1)"
    replaces="$(grep -E '^[[:space:]]*(replace[[:space:]]+)?[^[:space:]]+([[:space:]]+v[^[:space:]]+)?[[:space:]]+=>' "$dir/go.mod" | sed -E 's/^[[:space:]]*(replace[[:space:]]+)?//')"
    {
        echo "module gpuguard-peers-kyverno"
        echo
        echo "$godirective"
        echo
        echo "replace ("
        printf '\t%s\n' "$replaces"
        echo ")"
    } > "$WRAP/go.mod"
    printf 'package main\n\nfunc main() {}\n' > "$WRAP/main.go"
    cp "$dir/go.sum" "$WRAP/go.sum"
    chmod u+w "$WRAP/go.sum"
    (cd "$WRAP" && log "go get github.com/kyverno/kyverno@$KYVERNO_VERSION" \
        && go get "github.com/kyverno/kyverno@$KYVERNO_VERSION" \
        && cat "$dir/go.sum" >> go.sum && sort -u go.sum -o go.sum)
    touch "$WRAP/.resolved"
fi

ldflags="-s -w -X github.com/kyverno/kyverno/pkg/version.BuildVersion=$KYVERNO_VERSION"
cd "$WRAP"
if [[ ! -x "$OUT/kubectl-kyverno" ]]; then
    log "go build kubectl-kyverno (cold: 6-19 min on a busy 2-core machine)"
    nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$OUT/kubectl-kyverno.tmp" \
        github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno
    mv -f "$OUT/kubectl-kyverno.tmp" "$OUT/kubectl-kyverno"
fi
if [[ "${KYVERNO_CLI_ONLY:-0}" != 1 && ! -x "$OUT/kyverno" ]]; then
    log "go build kyverno (admission controller; shares most packages with the CLI)"
    nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$OUT/kyverno.tmp" \
        github.com/kyverno/kyverno/cmd/kyverno
    mv -f "$OUT/kyverno.tmp" "$OUT/kyverno"
fi
log "done: $("$OUT/kubectl-kyverno" version 2>/dev/null | head -1 || true) in $OUT"
