"""Cost at risk: which decisions count, how they are priced, and how totals add up.

Synthetic ``Decision`` objects keep these tests about the estimate itself, independent of
what the policies find in a given manifest.
"""

from __future__ import annotations

import pytest
import yaml

from gpuguard.webhook.cli.audit import cost
from gpuguard.webhook.cli.audit.run import evaluate_all, file_context
from gpuguard.webhook.config import Cost, load_config
from gpuguard.webhook.decision import Decision, Violation
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.manifests import load
from tests.support.paths import REPO


def decision(gpus: dict[str, int], *, mutated_by=(), violations=(), obj=None) -> Decision:
    return Decision(allowed=True, api_version="batch/v1", kind="Job", namespace="ml", name="j", original=obj,
                    mutated=obj, mutated_by=list(mutated_by), violations=list(violations),
                    gpus=sum(gpus.values()), gpus_by_resource=dict(gpus))


def job_on(product: str, how: str = "selector") -> dict:
    pod: dict = {"containers": [{"name": "t"}]}
    if how == "selector":
        pod["nodeSelector"] = {"nvidia.com/gpu.product": product}
    else:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}]}]}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": pod}}}


PRICES = cost.Prices({"nvidia.com/gpu": 4.0, "nvidia.com/mig-*": 1.0}, {"NVIDIA-H100-80GB-HBM3": 9.0, "*L4*": 0.8})


def test_only_missing_deadline_ttl_or_unschedulable_counts() -> None:
    assert cost.workload_cost(decision({"nvidia.com/gpu": 2}), PRICES) is None
    assert cost.workload_cost(decision({"nvidia.com/gpu": 2}, mutated_by=["default-resources"]), PRICES) is None
    warn_shape = Violation("gpu-request-shape", "warn", "spec", "memory", "fix")
    assert cost.workload_cost(decision({"nvidia.com/gpu": 2}, violations=[warn_shape]), PRICES) is None
    assert cost.workload_cost(decision({}, mutated_by=["job-ttl"]), PRICES) is None  # no GPU, nothing at risk

    ttl = cost.workload_cost(decision({"nvidia.com/gpu": 2}, mutated_by=["job-ttl", "job-limits"]), PRICES)
    assert ttl is not None and ttl.reasons == ("job-limits", "job-ttl")
    assert ttl.gpu_hours_per_day == 48 and ttl.usd_per_day == pytest.approx(2 * 24 * 4.0)
    # A mutating policy in warn/audit mode reports instead of mutating: it still counts.
    would = Violation("job-limits", "audit", "metadata", "would change /spec/activeDeadlineSeconds", "fix")
    assert cost.workload_cost(decision({"nvidia.com/gpu": 1}, violations=[would]), PRICES).reasons == ("job-limits",)
    deny_shape = Violation("gpu-request-shape", "deny", "spec", "16 GPUs on 8-GPU nodes", "fix")
    pend = cost.workload_cost(decision({"nvidia.com/gpu": 16}, violations=[deny_shape]), PRICES)
    assert pend.reasons == ("gpu-request-shape",) and pend.usd_per_day == pytest.approx(16 * 24 * 4.0)


@pytest.mark.parametrize("how", ["selector", "affinity"])
def test_pinned_product_price_wins_for_whole_gpus(how: str) -> None:
    d = decision({"nvidia.com/gpu": 8}, mutated_by=["job-ttl"], obj=job_on("NVIDIA-H100-80GB-HBM3", how))
    assert cost.workload_cost(d, PRICES).usd_per_day == pytest.approx(8 * 24 * 9.0)
    d = decision({"nvidia.com/gpu": 1}, mutated_by=["job-ttl"], obj=job_on("NVIDIA-L4"))
    assert cost.workload_cost(d, PRICES).usd_per_day == pytest.approx(24 * 0.8)  # glob, case-insensitive
    # A MIG slice of an H100 is priced as a slice, not as a whole H100.
    d = decision({"nvidia.com/mig-1g.10gb": 2}, mutated_by=["job-ttl"], obj=job_on("NVIDIA-H100-80GB-HBM3"))
    assert cost.workload_cost(d, PRICES).usd_per_day == pytest.approx(2 * 24 * 1.0)


def test_unpriced_resources_are_listed_not_guessed() -> None:
    c = cost.workload_cost(decision({"example.com/fpga": 2, "nvidia.com/gpu": 1}, mutated_by=["job-ttl"]), PRICES)
    assert c.unpriced == {"example.com/fpga": 2}
    assert c.usd_per_day == pytest.approx(24 * 4.0) and c.gpus == 3
    summary = cost.summarize([c, c])
    assert summary["unpricedGpus"] == {"example.com/fpga": 4}
    assert summary["workloads"] == 2 and summary["usdPerDay"] == pytest.approx(2 * 24 * 4.0)
    assert summary["byReason"]["job-ttl"]["workloads"] == 2
    assert summary["estimate"] is True and "24 hours a day" in summary["method"]


def test_prices_come_from_the_config_cost_section() -> None:
    config = load_config(None)
    prices = cost.Prices.from_config(config)
    assert prices.gpu_hourly_usd == config.cost.gpu_hourly_usd
    assert prices.product_hourly_usd == config.cost.product_hourly_usd
    assert cost.Prices.from_config(object()).gpu_hourly_usd == Cost().gpu_hourly_usd


def test_one_price_table_the_shipped_config_and_the_docs_agree() -> None:
    """The shipped config has no cost section, so it gets the model's prices; docs/audit.md shows them."""
    assert load_config(None).cost == Cost()
    docs = (REPO / "docs" / "audit.md").read_text()
    block = docs.split("```yaml\napiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\ncost:", 1)[1]
    shown = yaml.safe_load("cost:" + block.split("```", 1)[0])["cost"]
    assert shown == Cost().model_dump(by_alias=True), "docs/audit.md shows other prices than webhook/config/__init__.py"


def test_without_gpus_by_resource_all_gpus_are_nvidia() -> None:
    class Old:
        gpus = 3

    assert cost.gpus_by_resource(Old()) == {"nvidia.com/gpu": 3}  # type: ignore[arg-type]


@pytest.mark.parametrize(("status", "finished"), [
    ({"conditions": [{"type": "Complete", "status": "True"}]}, True),          # Job
    ({"conditions": [{"type": "Failed", "status": "True"}]}, True),
    ({"conditions": [{"type": "Succeeded", "status": "True"}]}, True),         # Kubeflow jobs
    ({"conditions": [{"type": "Completed", "status": "True"}]}, True),         # JobSet
    ({"conditions": [{"type": "Complete", "status": "False"}]}, False),
    ({"phase": "Succeeded"}, True),                                             # Pod
    ({"phase": "Running"}, False),
    ({"jobDeploymentStatus": "Complete"}, True),                                # RayJob
    ({"jobDeploymentStatus": "Running"}, False),
    ({"state": {"phase": "Completed"}}, True),                                  # Volcano Job
    ({}, False),
])
def test_finished_workloads_hold_no_gpus(status, finished) -> None:
    assert cost.is_finished({"status": status}) is finished


def test_audit_leaves_finished_workloads_out_of_the_cost_at_risk() -> None:
    from gpuguard.webhook.cli.audit.run import evaluate_all, file_context
    from gpuguard.webhook.engine.core import Engine
    from gpuguard.webhook.manifests import Document

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "done", "namespace": "ml"},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}}
    engine = Engine(load_config())
    running = Document("live", 0, obj=job)
    done = Document("live", 1, obj=job, finished=True)
    items = list(evaluate_all([(running, file_context(job, "ml")), (done, file_context(job, "ml"))],
                              engine.evaluate, PRICES))
    assert items[0].cost is not None and items[0].cost.gpus == 4
    assert items[1].cost is None


def test_idle_devices_alone_count_for_a_server_whose_parallelism_leaves_them_unused() -> None:
    idle = Violation("server-parallelism", "warn", "spec", "6 idle per pod, 12 in all", "fix",
                     idle=(("nvidia.com/gpu", 12),))
    only = cost.workload_cost(decision({"nvidia.com/gpu": 16}, violations=[idle]), PRICES)
    assert only is not None and only.reasons == ("server-parallelism",)
    assert only.gpus == 12 and only.usd_per_day == pytest.approx(12 * 24 * 4.0)  # the 4 used ones are not at risk
    # With a whole-workload reason beside it, all 16 count (the idle ones are among them, counted once).
    both = cost.workload_cost(decision({"nvidia.com/gpu": 16}, violations=[idle], mutated_by=["job-ttl"]), PRICES)
    assert both.gpus == 16 and both.reasons == ("job-ttl", "server-parallelism")
    # A finding that names no idle devices (a server that can't start) is not a cost of idleness.
    fails = Violation("server-parallelism", "deny", "spec", "needs 8 devices", "fix")
    assert cost.workload_cost(decision({"nvidia.com/gpu": 4}, violations=[fails]), PRICES) is None


def test_a_warning_and_the_audit_price_idle_devices_alike(tmp_path) -> None:
    """The figure in the server-parallelism warning is the audit's: one price table, the pinned product first."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llm", "namespace": "ml"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}}, "template": {
                      "metadata": {"labels": {"app": "llm"}},
                      "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "containers": [{
                          "name": "server", "image": "vllm/vllm-openai:v0.10.1",
                          "command": ["vllm", "serve", "org/model", "--tensor-parallel-size", "2"],
                          "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump({"apiVersion": "gpuguard.io/v1alpha1", "kind": "GpuguardConfig",
                                           "cost": {"gpuHourlyUsd": {"nvidia.com/gpu": 2.0},
                                                    "productHourlyUsd": {"*H100*": 10.0}}}))
    manifest = tmp_path / "llm.yaml"
    manifest.write_text(yaml.safe_dump(deployment))
    config = load_config(str(config_file))
    pairs = ((doc, file_context(doc.obj, "default")) for doc in load([str(manifest)]))
    [item] = list(evaluate_all(pairs, Engine(config).evaluate, cost.Prices.from_config(config)))
    [warning] = [v for v in item.decision.violations if v.policy == "server-parallelism"]
    assert "6 idle, 144 device-hours a day (~$1,440)" in warning.message  # 6 H100s x 24 h x $10
    assert item.cost is not None and item.cost.usd_per_day == pytest.approx(1440.0)


@pytest.mark.parametrize(("usd", "unpriced", "expected"), [
    (96.0, {}, "cost at risk ≈ $96/day"),
    (0.0, {"gpu.nvidia.com": 2}, "cost at risk: not priced (no price for gpu.nvidia.com in the config's prices)"),
    (96.0, {"example.com/accel": 1, "acme.ai/npu": 4}, "cost at risk ≈ $96/day and unpriced acme.ai/npu, "
                                                       "example.com/accel"),
])
def test_a_headline_never_prices_an_unknown_device_as_free(usd, unpriced, expected) -> None:
    workload = cost.WorkloadCost(("job-ttl",), 2, 48.0, usd, unpriced)
    assert workload.headline(lambda value: f"${value:,.0f}") == expected


def _gpu_job(**spec) -> dict:
    pod = {"restartPolicy": "Never", "containers": [{"name": "t", "image": "x", "command": ["python", "q.py"],
                                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "q", "namespace": "ml"},
            "spec": {**spec, "template": {"spec": pod}}}


@pytest.mark.parametrize(("spec", "at_risk"), [
    ({"activeDeadlineSeconds": 259200}, False),  # its own deadline: job-limits only adds backoffLimit
    ({}, True),  # no deadline: job-limits sets one
    ({"activeDeadlineSeconds": 9_999_999}, True),  # above the cap: job-limits caps it
])
def test_job_limits_counts_only_a_missing_or_capped_deadline(spec, at_risk) -> None:
    decision = Engine(load_config()).evaluate(_gpu_job(**spec))
    assert "job-limits" in decision.mutated_by
    assert ("job-limits" in cost.risk_reasons(decision)) is at_risk
