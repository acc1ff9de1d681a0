#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler from the Go module proxy, and
# provide etcd.
#
# Why a wrapper module: `go install k8s.io/kubernetes/cmd/...@vX` is refused because
# k8s.io/kubernetes' go.mod has replace directives (its staging modules at v0.0.0).  We create a
# throw-away module outside the repo that requires k8s.io/kubernetes and re-creates those replaces
# pointing at the published staging modules (k8s.io/X v0.MINOR.PATCH).
#
# Idempotent: if the binaries are already in the cache and etcd is available, it exits at once; when
# only some are missing (e.g. a cache from before kube-scheduler was added), only those are built.
#
# Env:
#   K8S_VERSION          Kubernetes release (default v1.33.13, see below)
#   GPUGUARD_E2E_CACHE   cache root (default $HOME/.cache/gpuguard-e2e); binaries in $CACHE/$K8S_VERSION/
#   ETCD_VERSION         etcd to build when Debian's etcd-server is not usable (default v3.5.16)
#   GPUGUARD_E2E_NO_APT  set to 1 to never apt-get install etcd-server (build etcd from source instead)
#   GPUGUARD_E2E_ETCD_FROM_SOURCE  set to 1 to ignore any etcd on PATH and build $ETCD_VERSION into the cache
set -euo pipefail

# v1.33.13, not v1.32.x: the Go module proxy reachable here answers 403 "This module version is
# not available" for staging modules that kube-controller-manager imports at every 1.32 patch we
# tried (v0.32.13: kube-controller-manager, kube-scheduler, endpointslice, csi-translation-lib,
# cri-client; v0.32.10: endpointslice, metrics, kube-aggregator, externaljwt, ...).  At v0.33.13 only
# sample-apiserver, sample-cli-plugin and sample-controller are missing, and nothing we build imports
# them, so they are stubbed below.  kubectl 1.32 against a 1.33 server is within the supported skew.
K8S_VERSION="${K8S_VERSION:-v1.33.13}"
ETCD_VERSION="${ETCD_VERSION:-v3.5.16}"
CACHE_ROOT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}"
OUT="$CACHE_ROOT/$K8S_VERSION"
WRAP="$CACHE_ROOT/wrapper-$K8S_VERSION"
ETCD_WRAP="$CACHE_ROOT/wrapper-etcd-$ETCD_VERSION"

log() { printf '[gpuguard-e2e build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

# Staging modules are published as v0.<minor>.<patch> for release v1.<minor>.<patch>.
STAGING_VERSION="v0.${K8S_VERSION#v1.}"

K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler)
missing_k8s() { local b; for b in "${K8S_BINARIES[@]}"; do [[ -x "$OUT/$b" ]] || echo "$b"; done; }
have_k8s() { [[ -z "$(missing_k8s)" ]]; }
etcd_path() {
    if [[ -x "$OUT/etcd" ]]; then echo "$OUT/etcd"; return 0; fi
    [[ "${GPUGUARD_E2E_ETCD_FROM_SOURCE:-0}" == 1 ]] && return 1
    command -v etcd 2>/dev/null && return 0
    return 1
}

if have_k8s && etcd_path >/dev/null; then
    log "binaries cached in $OUT (etcd: $(etcd_path)); nothing to do"
    exit 0
fi

# Go's tarball install is often not on a non-login shell's PATH (e.g. under CI).
if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || die "go not found on PATH (need Go >= 1.24 to build Kubernetes $K8S_VERSION)"

export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-mod=mod -buildvcs=false"
mkdir -p "$OUT"

# ---------------------------------------------------------------- etcd
install_etcd() {
    if etcd_path >/dev/null; then
        log "etcd: $(etcd_path)"
        return 0
    fi
    if [[ "${GPUGUARD_E2E_NO_APT:-0}" != 1 && "${GPUGUARD_E2E_ETCD_FROM_SOURCE:-0}" != 1 && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        log "etcd: installing Debian package etcd-server (service start suppressed)"
        # policy-rc.d exit 101 stops maintainer scripts from starting the system service; we always
        # run our own etcd on free loopback ports.
        local made_policy=0
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
            chmod +x /usr/sbin/policy-rc.d
            made_policy=1
        fi
        local rc=0
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server; then
            log "etcd: apt-get install failed; running apt-get update and retrying once"
            apt-get update -q || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server || rc=$?
        fi
        [[ $made_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d
        if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then
            systemctl disable --now etcd >/dev/null 2>&1 || true
        fi
        if [[ $rc == 0 ]] && etcd_path >/dev/null; then
            log "etcd: $(etcd_path) ($(etcd --version 2>/dev/null | head -1))"
            return 0
        fi
        log "etcd: Debian package unavailable; building from source instead"
    fi
    log "etcd: building go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    mkdir -p "$ETCD_WRAP"
    (
        cd "$ETCD_WRAP"
        [[ -f go.mod ]] || go mod init gpuguard-e2e-etcd >/dev/null 2>&1
        go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
        go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
        mv -f "$OUT/etcd.tmp" "$OUT/etcd"
    )
    log "etcd: built $OUT/etcd"
}

# ---------------------------------------------------------------- kubernetes
build_k8s() {
    if have_k8s; then
        log "kubernetes: cached in $OUT"
        return 0
    fi
    log "kubernetes $K8S_VERSION: downloading k8s.io/kubernetes go.mod from the module proxy"
    local json gomod
    json="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION")" || die "go mod download k8s.io/kubernetes@$K8S_VERSION failed"
    gomod="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -1)"
    [[ -f "$gomod" ]] || die "could not find GoMod path in: $json"

    # Every `k8s.io/X => ./staging/src/k8s.io/X` line of the release's go.mod becomes
    # `k8s.io/X => k8s.io/X $STAGING_VERSION` in ours.  Replaces must exist before `go get`,
    # otherwise it fails with "unknown revision v0.0.0".
    local staging
    staging="$(grep -Eo 'k8s\.io/[A-Za-z0-9._/-]+[[:space:]]+=>[[:space:]]+\./staging/' "$gomod" \
        | awk '{print $1}' | sort -u)"
    local n
    n="$(printf '%s\n' "$staging" | grep -c . || true)"
    [[ "$n" -gt 0 ]] || die "no staging replaces found in $gomod"
    local godirective godebug
    godirective="$(grep -E '^go [0-9]' "$gomod" | head -1)"
    godebug="$(grep -E '^godebug ' "$gomod" || true)"
    log "kubernetes: $n staging modules pinned to $STAGING_VERSION ($godirective${godebug:+, $godebug})"

    rm -rf "$WRAP"
    mkdir -p "$WRAP/_unavailable"
    # A staging module the proxy will not serve at $STAGING_VERSION still has to appear in the module
    # graph (k8s.io/kubernetes requires all of them), so it gets an empty local stub.  If a package we
    # compile does import it, `go build` fails naming the module: pick another K8S_VERSION then.
    local replaces="" m
    for m in $staging; do
        # Capture first: `| grep -q` under pipefail would report SIGPIPE as failure.
        local dl
        dl="$(go mod download -json "$m@$STAGING_VERSION" 2>&1 || true)"
        if [[ "$dl" == *'"Error"'* ]]; then
            log "kubernetes: $m@$STAGING_VERSION not served by the module proxy; using an empty stub"
            mkdir -p "$WRAP/_unavailable/${m#k8s.io/}"
            printf 'module %s\n\ngo 1.23\n' "$m" > "$WRAP/_unavailable/${m#k8s.io/}/go.mod"
            replaces+="	$m => ./_unavailable/${m#k8s.io/}"$'\n'
        else
            replaces+="	$m => $m $STAGING_VERSION"$'\n'
        fi
    done
    {
        echo "module gpuguard-e2e-kube"
        echo
        # Same go/godebug lines as the release so GODEBUG defaults match what upstream ships.
        echo "$godirective"
        [[ -n "$godebug" ]] && echo "$godebug"
        echo
        echo "replace ("
        printf '%s' "$replaces"
        echo ")"
    } > "$WRAP/go.mod"
    # Keep the wrapper a valid package so `go get` is happy; never `go mod tidy` it (1.32 needs the
    # exact otelgrpc/grpc versions it pins).
    printf 'package main\n\nfunc main() {}\n' > "$WRAP/main.go"

    cd "$WRAP"
    log "kubernetes: go get k8s.io/kubernetes@$K8S_VERSION (resolves the module graph)"
    go get "k8s.io/kubernetes@$K8S_VERSION"

    local pkg="k8s.io/component-base/version" cpkg="k8s.io/client-go/pkg/version"
    local major minor date ldflags=""
    major="$(echo "$K8S_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/')"
    minor="$(echo "$K8S_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')"
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    for p in "$pkg" "$cpkg"; do
        ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor"
        ldflags+=" -X $p.gitCommit=0000000000000000000000000000000000000000 -X $p.gitTreeState=clean"
        ldflags+=" -X $p.buildDate=$date"
    done

    local tmp="$OUT/.build-tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    # Only what is missing: binaries already cached (and maybe running in another test) stay as they
    # are.  kube-scheduler shares all but a handful of its packages with the other two (warm: ~30 s).
    local missing=() pkgs=() b
    mapfile -t missing < <(missing_k8s)
    for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
    log "kubernetes: go build ${missing[*]} (cold, all three: ~5-6 min on 2 cores, ~2 GB RSS)"
    go build -trimpath -ldflags "-s -w$ldflags" -o "$tmp/" "${pkgs[@]}"
    for b in "${missing[@]}"; do
        mv -f "$tmp/$b" "$OUT/$b"  # rename: atomic for anyone running the old file
    done
    rm -rf "$tmp"
    log "kubernetes: built $("$OUT/kube-apiserver" --version) into $OUT"
}

start=$SECONDS
install_etcd
build_k8s
log "done in $((SECONDS - start)) s: $(ls "$OUT" | tr '\n' ' ')"
