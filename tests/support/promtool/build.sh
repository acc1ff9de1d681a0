#!/usr/bin/env bash
# Build promtool (Prometheus' rule checker and rule unit-test runner) from the Go module proxy, for
# the monitoring pack's tests (tests/unit/project/test_monitoring.py).  Idempotent: exits at once
# when the binary is cached.  Cached as $GPUGUARD_E2E_CACHE/promtool-$PROMETHEUS_VERSION/promtool
# (default cache ~/.cache/gpuguard-e2e).  A cold build compiles much of Prometheus: minutes.
set -euo pipefail
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # the Go module of Prometheus v3.x, whose promtool this is
CACHE_ROOT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}"
OUT="$CACHE_ROOT/promtool-$PROMETHEUS_VERSION"
log() { printf '[gpuguard promtool build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
if [[ -x "$OUT/promtool" ]]; then
    log "promtool cached in $OUT; nothing to do"
    exit 0
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { log "ERROR: go not found on PATH"; exit 1; }
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/promtool.lock"  # two test runs must not build it at once
flock 9
if [[ -x "$OUT/promtool" ]]; then exit 0; fi
start=$SECONDS
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-buildvcs=false" GOBIN="$OUT.tmp" \
    go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "built promtool $PROMETHEUS_VERSION into $OUT in $((SECONDS - start)) s"
