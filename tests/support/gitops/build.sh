#!/usr/bin/env bash
# Build `gitops-drift` (main.go beside this script) from the Go module proxy into the e2e cache: a small
# program around the GitOps tools' own drift detection, for tests/e2e/test_gitops_e2e.py, which
# checks what docs/gitops.md says Flux and Argo CD make of gpuguard's changes.
#
#   Flux      github.com/fluxcd/pkg/ssa v0.48.0 (what kustomize-controller v1.6.0, Flux v2.6, applies
#             and detects drift with; its drift check is unchanged up to v0.76, the newest that
#             builds with Go 1.26)
#   Argo CD   github.com/argoproj/gitops-engine at e48120133eec (what Argo CD v3.1.x links; v3.2
#             links a later commit on Kubernetes 1.34 libraries, v3.3-v3.5 build it from their own
#             tree, v3.6 publishes it as github.com/argoproj/argo-cd/gitops-engine/v3, Go 1.27)
#
# Both sit on Kubernetes 1.33 libraries, pinned to v0.33.13 by go.mod's replace lines (as
# tests/support/cluster/build.sh pins the control plane), so most Kubernetes packages come from the
# control plane build's Go cache.  go.mod and go.sum pin every module; the build neither resolves
# nor changes them (-mod=readonly).  To move to other versions: edit go.mod's require lines, then
# `go mod tidy` here.
#
# Idempotent: exits at once when the binary for these sources is cached, as
# $CACHE/gitops-drift-<first 12 hex digits of sha256(go.mod go.sum main.go)>/gitops-drift, so an edit
# of any of them builds anew.  CGO off: a static binary.
#
# Cost (2 cores, Go 1.26.8, measured with /usr/bin/time -v): fully cold (empty GOMODCACHE and GOCACHE)
# 224 s wall, 346 s user + 64 s system CPU, 0.96 GB peak RSS; it leaves 68 MB of module zips
# (453 MB unpacked), 0.87 GB of Go build cache and the 60 MB binary.  After the control plane's
# build (its Go cache kept, a busy machine) 287 s wall, 250 s user, +0.66 GB of Go build cache.
# Warm (Go caches kept, sources edited): about 10 s.
#
# Env:
#   GPUGUARD_E2E_CACHE   cache root (default $HOME/.cache/gpuguard-e2e)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_ROOT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}"
KEY="$(cat "$HERE/go.mod" "$HERE/go.sum" "$HERE/main.go" | sha256sum | cut -c1-12)"
OUT="$CACHE_ROOT/gitops-drift-$KEY"

log() { printf '[gpuguard gitops-drift build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

if [[ -x "$OUT/gitops-drift" ]]; then
    log "gitops-drift cached in $OUT; nothing to do"
    exit 0
fi

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || die "go not found on PATH"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"

mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/gitops-drift.lock"  # two test runs must not build it at once
flock 9
if [[ -x "$OUT/gitops-drift" ]]; then
    log "gitops-drift built meanwhile in $OUT"
    exit 0
fi
start=$SECONDS
tmp="$(mktemp -d "$CACHE_ROOT/.gitops-drift-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "go build gitops-drift (fluxcd/pkg/ssa, argoproj/gitops-engine on Kubernetes 1.33 libraries)"
# -trimpath as the control plane's build, so its compiled Kubernetes packages are reused.
(cd "$HERE" && go build -trimpath -ldflags "-s -w" -o "$tmp/gitops-drift" .) || die "go build failed"
rm -rf "$OUT" && mkdir -p "$OUT"
mv "$tmp/gitops-drift" "$OUT/gitops-drift"
for stale in "$CACHE_ROOT"/gitops-drift-*; do  # binaries of earlier sources
    [[ "$stale" == "$OUT" || ! -d "$stale" ]] || rm -rf "$stale"
done
log "built gitops-drift into $OUT in $((SECONDS - start)) s"
