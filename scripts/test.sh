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

# The e2e matrix: the whole suite (and tests/e2e/release, what only it serves) on the newest release, and a subset
# on Kubernetes 1.33 (tests/support/cluster/build.sh's default, the oldest supported): the modules whose premises
# differ by release (DRA v1beta1, pod-level resources' validation) and the control plane's basics
# (tests/support/cluster/README.md, "The e2e matrix").
K8S_NEWEST="${K8S_NEWEST:-v1.36.3}"
K8S_OLDEST="${K8S_OLDEST:-v1.33.13}"
E2E_OLDEST_SUBSET=(tests/e2e/test_controlplane_smoke.py tests/e2e/test_admission_e2e.py tests/e2e/test_lifecycle_e2e.py
                   tests/e2e/test_dra_inventory_e2e.py tests/e2e/test_scheduler_truth_e2e.py
                   tests/e2e/test_accelerators_e2e.py)

# kube-apiserver, kube-controller-manager, kube-scheduler and etcd for the e2e suite (a no-op once cached).
if command -v go >/dev/null || [ -x /usr/local/go/bin/go ]; then
  K8S_VERSION="$K8S_OLDEST" bash tests/support/cluster/build.sh
  K8S_VERSION="$K8S_NEWEST" bash tests/support/cluster/build.sh  # the newest release (its own cache directory)
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
K8S_VERSION="$K8S_NEWEST" python3 -m pytest -p no:cacheprovider "$@"
# The oldest release, when the whole suite was asked for (no arguments): a run given its own selection is the
# caller's to choose; `K8S_VERSION=v1.33.13 python3 -m pytest tests/e2e/...` runs a module on it alone.
if [ $# -eq 0 ]; then
  K8S_VERSION="$K8S_OLDEST" python3 -m pytest -p no:cacheprovider "${E2E_OLDEST_SUBSET[@]}"
fi
