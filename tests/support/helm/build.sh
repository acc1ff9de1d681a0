#!/usr/bin/env bash
# Build `helm` from the Go module proxy into the e2e cache, as tests/support/cluster/build.sh builds
# the control plane: the chart tests (helm lint, helm template, install/upgrade/uninstall against the
# e2e apiserver) run the real Helm, and no prebuilt binary can be downloaded here.
#
# `go install helm.sh/helm/v3/cmd/helm@VERSION` works as is (helm's go.mod has no replace
# directives, unlike k8s.io/kubernetes'), so no wrapper module.  GOFLAGS is set to
# -buildvcs=false only: `-mod=mod` (which the control-plane build needs for its wrapper) is
# refused by `go install pkg@version`.  CGO off: a static binary, like the release's.
#
# Idempotent: exits at once when $CACHE/helm-$HELM_VERSION/helm exists.
#
# Cost of a cold build (empty GOMODCACHE and GOCACHE, measured with /usr/bin/time -v on this 2-core
# machine): 162 s user + 37 s system CPU, 0.84 GB peak RSS, 99 MB of modules downloaded (413 MB unpacked); 20 min wall
# under a load average of 20 (niced), so about 2 min on an idle machine.  Warm: nothing is rebuilt.
#
# Env:
#   HELM_VERSION         Helm release (default v3.22.0: the newest v3 the module proxy serves here;
#                        it needs Go >= 1.26, older v3.18-v3.21 patches build with older Go)
#   GPUGUARD_E2E_CACHE   cache root (default $HOME/.cache/gpuguard-e2e); binary in $CACHE/helm-$HELM_VERSION/
set -euo pipefail

HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE_ROOT="${GPUGUARD_E2E_CACHE:-$HOME/.cache/gpuguard-e2e}"
OUT="$CACHE_ROOT/helm-$HELM_VERSION"

log() { printf '[gpuguard helm build %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { log "ERROR: $*"; exit 1; }

if [[ -x "$OUT/helm" ]]; then
    log "helm cached in $OUT; nothing to do"
    exit 0
fi

if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then PATH="/usr/local/go/bin:$PATH"; fi
command -v go >/dev/null || die "go not found on PATH"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOWORK=off GOFLAGS="-buildvcs=false"

start=$SECONDS
json="$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION")" || die "go mod download helm.sh/helm/v3@$HELM_VERSION failed"
gomod="$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' | head -1)"
[[ -f "$gomod" ]] || die "no GoMod in: $json"
# Helm's Makefile derives the default Kubernetes version (`helm template`'s .Capabilities and the
# lint deprecation checks) from the client-go it builds with: client-go v0.M.N is Kubernetes 1.M.
client_go="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$gomod")"
k8s_minor="$(printf '%s' "$client_go" | sed -E 's/^v0\.([0-9]+)\..*/\1/')"
[[ "$k8s_minor" =~ ^[0-9]+$ ]] || die "could not read k8s.io/client-go's version from $gomod"

ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$k8s_minor"
done

mkdir -p "$OUT"
# Two test runs may start at once: the second waits for the first's build, then finds the binary.
exec 9>"$OUT/.lock"
flock 9
if [[ -x "$OUT/helm" ]]; then
    log "helm built meanwhile in $OUT"
    exit 0
fi
tmp="$(mktemp -d "$OUT/.build-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION (Kubernetes 1.$k8s_minor client; cold: ~200 s of CPU, 0.85 GB)"
GOBIN="$tmp" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
mv -f "$tmp/helm" "$OUT/helm"
log "built $("$OUT/helm" version --short) into $OUT in $((SECONDS - start)) s"
