#!/usr/bin/env bash
# The whole test suite, on a fresh machine too: installs what it needs, then lint, types, layers,
# generated files + pytest.
#   unit tests      engine, policies, config, certs, server over real HTTPS, audit formats
#   e2e tests       a real kube-apiserver + kube-controller-manager (built once from the Go
#                   module proxy, cached in ~/.cache/gpuguard-e2e) + etcd, driven with kubectl
#   browser test    the audit HTML report rendered in headless Chromium
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m "not e2e"`).
set -euo pipefail
cd "$(dirname "$0")/.."

# At the lock's versions (requirements/constraints.txt, written by `python3 scripts/lock.py`): the same
# packages on every machine and in CI; tests/unit/project/test_lock.py fails when they differ.
python3 -m pip install --quiet --disable-pip-version-check -c requirements/constraints.txt -e '.[test]'

# System packages the e2e and browser tests use (Debian's; root only, skipped when present).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  command -v jq >/dev/null || missing+=(jq)  # Argo CD's jqPathExpressions are checked with the real jq
  if [ ${#missing[@]} -gt 0 ]; then
    echo "test.sh: installing ${missing[*]} with apt-get"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# kube-apiserver, kube-controller-manager and etcd for the e2e suite (a no-op once cached).
if command -v go >/dev/null || [ -x /usr/local/go/bin/go ]; then
  bash tests/support/cluster/build.sh
  bash tests/support/helm/build.sh  # helm for the chart tests (helm lint/template, install e2e; cached)
  bash tests/support/promtool/build.sh  # Prometheus' rule checker, for the monitoring pack's alert tests
  bash tests/support/actionlint/build.sh  # actionlint (and shellcheck) for the workflow lint test (cached)
  bash tests/support/gitops/build.sh  # Flux's and Argo CD's own drift detection, for the GitOps e2e test (cached)
else
  echo "test.sh: Go is missing: the e2e tests will skip (and fail under CI=true)"
fi

ruff check .  # lint, with the complexity gate (outliers named in pyproject.toml)
bash scripts/typecheck.sh  # mypy over the engine, config, decision, workloads and policies
lint-imports  # the layering contracts in pyproject.toml
python3 scripts/generate.py --check  # every derived file (configs, tables, cases) is up to date
python3 bench/smoke.py  # every bench driver's paths and arguments (--check-paths, peers included), then each --quick run: fails when one breaks or a body is denied, never on speed
python3 -m pytest -p no:cacheprovider "$@"
