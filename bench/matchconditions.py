"""matchConditions: what the apiserver spends deciding that a request need not reach gpuguard.

``python bench/matchconditions.py`` (needs Go and the e2e build's module cache: ``bench/setup.sh``,
or a run of ``tests/support/cluster/build.sh``).  It builds ``bench/mcbench`` (a small Go program
around kube-apiserver's own ``k8s.io/apiserver`` matchConditions code: the matcher a webhook uses,
its CEL environment, the conversions of object and request) against the same Kubernetes release
as the e2e control plane, and times one webhook's conditions per request, in microseconds and
allocations, for the requests that matter most:

* a CPU Pod, Deployment, Job and PyTorchJob created by a user (they must not reach gpuguard),
* a CPU Pod created by the ReplicaSet controller for its ReplicaSet (the most frequent create),
* a GPU Pod created by a user (it must reach gpuguard: the condition is true).

Each under three variants: ``floor`` (one condition, the constant ``false``: what any condition
costs in conversions alone), ``one webhook`` (one webhook for every kind, the conditions of the
whole kind table) and ``per group`` (what ``gpuguard webhook-config`` ships: one webhook per API
group, each with its own kinds' conditions).  Allocations are exact; microseconds depend on the
machine and how busy it is.  Writes ``bench/results/matchconditions.json``; never fails on speed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from _common import HERE, ROOT, machine, machine_line, table, write_results
from _paths import add_option, check_paths

sys.path.insert(0, str(ROOT))

K8S_VERSION = "v1.33.13"
CACHE = Path(os.environ.get("GPUGUARD_E2E_CACHE", Path.home() / ".cache" / "gpuguard-e2e"))
WRAPPER = CACHE / f"wrapper-{K8S_VERSION}"  # tests/support/cluster/build.sh's module: its replaces pin the release
MODULE = CACHE / f"mcbench-{K8S_VERSION}"
SOURCE = HERE / "mcbench" / "main.go"
# What --check-paths checks (bench/_paths.py): the Go source, and the script that makes WRAPPER.
NEEDS = (SOURCE, ROOT / "tests" / "support" / "cluster" / "build.sh")
GO_ENV = {"CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOWORK": "off", "GOFLAGS": "-mod=mod -buildvcs=false"}

CPU = {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "500m", "memory": "256Mi"}}
RS_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"


def _pod_spec(resources: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"name": "app", "image": "registry.example/app:1", "resources": resources}]}


def _cases() -> list[dict[str, Any]]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "bench"},
           "spec": _pod_spec(CPU)}
    owned = {**pod, "metadata": {**pod["metadata"], "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9", "uid": "u-1", "controller": True}]}}
    gpu = {**pod, "spec": _pod_spec({"limits": {"nvidia.com/gpu": 1}})}
    template = {"metadata": {"labels": {"app": "web"}}, "spec": _pod_spec(CPU)}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "bench"},
                  "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "etl", "namespace": "bench"},
           "spec": {"template": {"spec": {**_pod_spec(CPU), "restartPolicy": "Never"}}}}
    roles = {"Master": {"replicas": 1, "template": template}, "Worker": {"replicas": 2, "template": template}}
    pytorchjob = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                  "metadata": {"name": "cpu", "namespace": "bench"}, "spec": {"pytorchReplicaSpecs": roles}}
    return [
        {"case": "CPU Pod, user", "object": pod, "group": "", "resource": "pods", "user": "alice"},
        {"case": "CPU Pod, ReplicaSet controller", "object": owned, "group": "", "resource": "pods",
         "user": RS_CONTROLLER},
        {"case": "GPU Pod, user", "object": gpu, "group": "", "resource": "pods", "user": "alice"},
        {"case": "CPU Deployment, user", "object": deployment, "group": "apps", "resource": "deployments",
         "user": "alice"},
        {"case": "CPU Job, user", "object": job, "group": "batch", "resource": "jobs", "user": "alice"},
        {"case": "CPU PyTorchJob, user", "object": pytorchjob, "group": "kubeflow.org", "resource": "pytorchjobs",
         "user": "alice"},
    ]


def build() -> Path:
    """``mcbench`` in a module of its own next to build.sh's wrapper (its replace directives)."""
    binary = MODULE / "mcbench"
    if binary.is_file() and binary.stat().st_mtime >= SOURCE.stat().st_mtime:
        return binary
    if not (WRAPPER / "go.mod").is_file():
        raise SystemExit(f"no {WRAPPER}/go.mod: run tests/support/cluster/build.sh (or bash bench/setup.sh) first")
    go = shutil.which("go") or "/usr/local/go/bin/go"
    MODULE.mkdir(parents=True, exist_ok=True)
    mod = (WRAPPER / "go.mod").read_text().replace("module gpuguard-e2e-kube", "module gpuguard-mcbench", 1)
    (MODULE / "go.mod").write_text(mod)
    shutil.copy(WRAPPER / "go.sum", MODULE / "go.sum")
    shutil.copy(SOURCE, MODULE / "main.go")
    (MODULE / "tools.go").unlink(missing_ok=True)
    print(f"building mcbench in {MODULE} (first time: a few minutes)...", file=sys.stderr)
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=MODULE, env={**os.environ, **GO_ENV}, check=True)
    return binary


def conditions() -> dict[str, dict[str, list[dict[str, str]]]]:
    """variant -> API group -> the conditions a request of that group is evaluated against."""
    from gpuguard.webhook.cli.match_conditions import filters_from
    from gpuguard.webhook.cli.webhook_config import kind_groups
    from gpuguard.webhook.config import load_config
    from gpuguard.workloads.kinds import KINDS

    filters = filters_from(load_config(None))
    whole = filters.conditions_for(KINDS)
    return {
        "floor": {group: [{"name": "never", "expression": "false"}] for group, _ in kind_groups()},
        "one webhook": {group: whole for group, _ in kind_groups()},
        "per group": {group: filters.conditions_for(kinds) for group, kinds in kind_groups()},
    }


def run(binary: Path, case: dict[str, Any], conds: list[dict[str, str]], workdir: Path) -> dict[str, Any]:
    version = case["object"]["apiVersion"].rsplit("/", 1)[-1]
    body = {"conditions": conds, "object": case["object"], "resource": case["resource"], "group": case["group"],
            "version": version, "username": case["user"], "operation": "CREATE"}
    path = workdir / "input.json"
    path.write_bytes(orjson.dumps(body))
    out = subprocess.run([str(binary), str(path)], capture_output=True, text=True, check=True, timeout=120)
    return orjson.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_option(parser)
    if parser.parse_args(argv).check_paths:
        return check_paths()
    binary = build()
    variants = conditions()
    rows, raw = [], []
    workdir = MODULE / "runs"
    workdir.mkdir(exist_ok=True)
    for case in _cases():
        row: list[Any] = [case["case"]]
        for variant, by_group in variants.items():
            result = run(binary, case, by_group[case["group"]], workdir)
            raw.append({"case": case["case"], "variant": variant, **result})
            row += [round(result["ns_per_op"] / 1000, 1), result["allocs_per_op"]]
            if variant == "per group":
                row.append("sent" if result["matches"] else "kept away")
        rows.append(row)
    headers = ["request (CREATE)", "floor us", "floor allocs", "one webhook us", "one webhook allocs",
               "per group us", "per group allocs", "gpuguard"]
    text = (f"matchConditions evaluated by k8s.io/apiserver {K8S_VERSION} (us and allocations per request, "
            f"one webhook; the apiserver evaluates each webhook whose rules match: /mutate and /validate)\n"
            + table(headers, rows))
    print(f"machine: {machine_line(machine())}\n\n{text}")
    path = write_results("matchconditions", {"settings": {"kubernetes": K8S_VERSION}, "results": raw,
                                             "tables": text})
    print(f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
