#!/usr/bin/env bash
# Installs what the benchmarks need and builds the fixed-rate load generator. Idempotent: a
# second run checks, installs nothing new and rebuilds only when the C source changed.
#   wrk            closed-loop saturation load (Debian package)
#   gcc, libssl-dev  build bench/loadgen/fixedrate.c (open-loop, fixed-rate HTTPS; Debian has no wrk2)
#   util-linux     taskset, to pin the server and the load generator to different cores
#   etcd-server    etcd for the apiserver benchmark (kube-apiserver itself is built by tests/e2e)
# With --uvicorn-standard it also makes bench/.build/venv-std: this Python's packages plus uvloop and
# httptools from PyPI, to compare the HTTP stack gpuguard ships (h11 + asyncio) with uvicorn[standard]:
#   python bench/server.py --python bench/.build/venv-std/bin/python --tag uvicorn-standard
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v gcc >/dev/null || need+=(gcc)
command -v taskset >/dev/null || need+=(util-linux)
command -v etcd >/dev/null || need+=(etcd-server)
[ -f /usr/include/openssl/ssl.h ] || need+=(libssl-dev)
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
    # Debian's etcd-server package may start a system etcd on 2379/2380; the benchmarks run their own.
    if [[ " ${need[*]} " == *" etcd-server "* ]] && command -v systemctl >/dev/null; then
        $SUDO systemctl disable --now etcd >/dev/null 2>&1 || true
    fi
fi

# gpuguard itself (editable), unless this Python already imports it from this checkout.
PY="${PYTHON:-python3}"
if ! (cd /tmp && "$PY" -c 'import gpuguard.webhook.engine.core' >/dev/null 2>&1); then
    "$PY" -m pip install -q -e "$ROOT"
fi

mkdir -p "$HERE/.build"
SRC="$HERE/loadgen/fixedrate.c"
BIN="$HERE/.build/fixedrate"
if [ ! -x "$BIN" ] || [ "$SRC" -nt "$BIN" ]; then
    gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o "$BIN" "$SRC" -lssl -lcrypto -lm
fi
if [ "${1:-}" = "--uvicorn-standard" ]; then
    VENV="$HERE/.build/venv-std"
    [ -x "$VENV/bin/python" ] || "$PY" -m venv --system-site-packages "$VENV"
    "$VENV/bin/python" -c 'import uvloop, httptools' 2>/dev/null || "$VENV/bin/python" -m pip install -q uvloop httptools
    echo "uvicorn[standard] comparison interpreter: $VENV/bin/python"
fi
echo "bench setup ok: $(wrk -v 2>&1 | head -1 | cut -c1-40); fixedrate: $BIN"
