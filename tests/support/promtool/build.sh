#!/usr/bin/env bash
# Build promtool (Prometheus' rule checker and rule unit-test runner) from the Go module proxy, for
# the monitoring pack's tests (tests/unit/project/test_monitoring.py).  Idempotent: exits at once
# when the binary is cached.  Cached in $GPUGUARD_E2E_CACHE/tools (default ~/.cache/gpuguard-e2e/tools).
set -euo pipefail
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"  # the module of Prometheus v3.x's promtool
OUT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}/tools"
BIN="$OUT/promtool-$PROMETHEUS_VERSION"
if [[ -x "$BIN" ]]; then
    echo "[promtool build] cached: $BIN"
    exit 0
fi
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || { echo "[promtool build] ERROR: go not found on PATH" >&2; exit 1; }
mkdir -p "$OUT"
echo "[promtool build] go install github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-buildvcs=false" GOBIN="$tmp" \
    go install "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_VERSION"
mv "$tmp/promtool" "$BIN"
echo "[promtool build] built $BIN"
