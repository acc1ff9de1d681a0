#!/usr/bin/env bash
# mypy over the engine, config, decision, workload model and policies ([tool.mypy] in pyproject.toml).
# The folders install under the `gpuguard` namespace by package-dir mapping, which mypy cannot
# follow through the editable install's import hook, so it reads them through a tree of links,
# build/typecheck/gpuguard/<folder> -> <folder>, and its messages are mapped back to the real paths.
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p build/typecheck/gpuguard
for folder in webhook policies workloads certs kubeapi; do
  ln -sfn "../../../$folder" "build/typecheck/gpuguard/$folder"
done
python3 -m mypy "$@" | sed 's#^build/typecheck/gpuguard/##'
