"""``gpuguard scan`` against the real control plane: PolicyReports that follow the cluster.

The wgpolicyk8s.io CRDs are installed (``tests/support/policyreport/crds.yaml``: the apiserver validates
every report against them), the scan runs as the ``gpuguard-scan`` ServiceAccount with the RBAC of
``deploy/scan``, and kube-controller-manager runs (Jobs make pods, which the scan must not report).
Some workloads are created while no webhook is registered (gpuguard down), one through the webhook;
then the workload, the scan's config and a node change, a workload is deleted, and a second scanner
stands by and takes over when the first is killed.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.cluster.controlplane import ControlPlane
from tests.support.cluster.fixtures import require_control_plane
from tests.support.gpuguard_process import GpuguardServer, default_config_with
from tests.support.scan_process import ScanProcess, install_report_crds, install_scan_identity
from tests.support.tenant import TenantEnv

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-a"


def _job(ns: str, name: str, gpus: int, **pod: object) -> dict:
    container: dict = {"name": "trainer", "image": "ghcr.io/example/train:1",
                       "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    container.update(pod.pop("container", {}))  # type: ignore[arg-type]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container], **pod}}}}


def _checkpointed(ns: str, name: str, gpus: int = 1) -> dict:
    return _job(ns, name, gpus, container={"volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]},
                volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}])


def _pytorchjob(ns: str) -> dict:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/example/train:1",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}},
                                         "env": [{"name": "CHECKPOINT_URI", "value": "s3://ckpt/ddp"}]}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "ddp", "namespace": ns},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template},
                                             "Worker": {"replicas": 2, "template": template}}}}


def _deployment(ns: str) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}


def _runtime(gang: bool) -> dict:
    """A ClusterTrainingRuntime whose trainer pods checkpoint to a claim; ganged by coscheduling or not."""
    pod = {"restartPolicy": "OnFailure", "containers": [{
        "name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime", "command": ["torchrun", "train.py"],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/checkpoints"}]}],
        "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "team-checkpoints"}}]}
    spec: dict = {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                  "template": {"spec": {"replicatedJobs": [{
                      "name": "node", "template": {
                          "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                          "spec": {"template": {"spec": pod}}}}]}}}
    if gang:
        spec["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torch-scan"}, "spec": spec}


def _trainjob(ns: str) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "tune", "namespace": ns},
            "spec": {"runtimeRef": {"name": "torch-scan"},
                     "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}


def _set_node(cp: ControlPlane, product: str, gpus: int) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product}}}
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(node))
    allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    cp.kubectl("patch", "node", NODE, "--subresource=status", "--type=merge",
               "-p", json.dumps({"status": {"capacity": allocatable, "allocatable": allocatable}}))


class Env:
    def __init__(self, cp: ControlPlane, tenant: TenantEnv, ns: str, workdir: Path, kubeconfig: Path,
                 config: Path, scan: ScanProcess) -> None:
        self.cp, self.tenant, self.ns, self.workdir = cp, tenant, ns, workdir
        self.kubeconfig, self.config, self.scan = kubeconfig, config, scan

    def reports(self, ns: str | None = None) -> dict[str, dict]:
        """The namespace's reports by their subject's name."""
        items = self.cp.kubectl_json("get", "policyreports", "-n", ns or self.ns)["items"]
        return {r["scope"]["name"]: r for r in items}

    def results(self, name: str, policy: str) -> list[dict]:
        report = self.reports().get(name) or {}
        return [r for r in report.get("results") or [] if r["policy"] == policy]

    def wait_result(self, name: str, policy: str, result: str, contains: str = "", timeout: float = 60) -> dict:
        def found() -> dict | None:
            hits = [r for r in self.results(name, policy) if r["result"] == result and contains in r["message"]]
            return hits[0] if hits else None
        return self.cp.wait_for(found, timeout=timeout, interval=0.5,
                                message=f"{name}: {policy} {result} {contains!r}\n{self.scan.log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Iterator[Env]:
    require_control_plane()
    workdir = tmp_path_factory.mktemp("gpuguard-scan")
    # ConfigMaps (which nothing here watches but one test) are served from etcd, not the watch cache: a release whose
    # cache still holds the whole history (1.36) would answer an old resourceVersion from it, never 410.
    with ControlPlane(workdir / "cp", extra_apiserver_args=("--watch-cache-sizes=configmaps#0",)) as cp:
        install_report_crds(cp)
        cp.install_crds("pytorchjob", "trainjob", "clustertrainingruntime", "trainingruntime")
        cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
        kubeconfig = install_scan_identity(cp, workdir)
        _set_node(cp, "NVIDIA-L4", 2)
        tenant = TenantEnv(cp, "scan")
        ns = tenant.namespace()
        # gpuguard is down (no webhook registered): these are stored as written
        cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_runtime(gang=False)))
        for obj in (_job(ns, "legacy", 1), _pytorchjob(ns), _deployment(ns), _trainjob(ns),
                    _job(ns, "big", 4, container={"env": [{"name": "CHECKPOINT_URI", "value": "s3://ckpt/big"}]})):
            result = tenant.apply(obj)
            assert result.returncode == 0, result.stderr
        config_text = default_config_with("scan-exempt")
        (workdir / "webhook").mkdir()
        server = GpuguardServer(workdir / "webhook", config_text, kubeconfig=cp.kubeconfig,
                                extra_args=("--node-inventory",))
        server.start()
        scan = None
        try:
            server.register(cp)
            cp.wait_for(lambda: tenant.apply(_job(ns, "probe-denied", 1), check=False).returncode != 0,
                        timeout=60, interval=1, message="gpuguard webhooks in force")
            admitted = tenant.apply(_checkpointed(ns, "good"))  # through the webhook: admitted in its shape
            assert admitted.returncode == 0, admitted.stderr
            config = workdir / "scan-config.yaml"
            config.write_text(config_text)
            scan = ScanProcess(workdir, kubeconfig, config, "scan-a").start()
            yield Env(cp, tenant, ns, workdir, kubeconfig, config, scan)
        finally:
            if scan is not None:
                scan.stop()
            server.stop()
            print(f"\n[e2e] scan log: {workdir}/scan-scan-a.log; gpuguard log: {server.log}")


def test_reports_appear_for_the_workloads_users_wrote_naming_the_policies_they_break(env: Env) -> None:
    env.scan.wait_metric("gpuguard_scan_full_passes_total", lambda v: v >= 1)
    env.wait_result("legacy", "checkpoint-volume", "fail", "[checkpoint-volume] spec.template.spec.containers[0]")
    gang = env.wait_result("ddp", "gang-scheduling", "fail")
    assert gang["severity"] == "high" and gang["category"] == "nvidia.com/gpu"
    too_big = env.wait_result("big", "schedulable", "fail", "largest eligible node has 2 (NVIDIA-L4")
    assert too_big["resources"][0]["kind"] == "Job" and too_big["resources"][0]["name"] == "big"
    reports = env.cp.wait_for(lambda: (r := env.reports()) and "good" in r and r, timeout=60)
    good = reports["good"]
    # admitted through the webhook: in its shape, nothing to say but passes
    assert good["summary"]["fail"] == good["summary"]["warn"] == good["summary"]["error"] == 0, good["results"]
    assert good["summary"]["pass"] >= 15
    # what users wrote, never what controllers made of it (the Jobs' pods), and no CPU-only workload
    assert sorted(reports) == ["big", "ddp", "good", "legacy", "tune"]
    for name, report in reports.items():
        kind = {"ddp": "PyTorchJob", "tune": "TrainJob"}.get(name, "Job")
        subject = env.cp.kubectl_json("get", kind.lower(), name, "-n", env.ns)
        assert report["metadata"]["ownerReferences"][0]["uid"] == subject["metadata"]["uid"] == report["scope"]["uid"]
        assert report["metadata"]["name"] == f"gpuguard-{subject['metadata']['uid']}"
    # alice reads them as kubectl users do
    table = env.cp.kubectl("--as=alice", "get", "polr", "-n", env.ns, "-o", "wide").stdout
    assert "legacy" in table and "PyTorchJob" in table
    metrics = env.scan.metrics()
    assert metrics[f'gpuguard_scan_findings{{namespace="{env.ns}",policy="checkpoint-volume",result="fail"}}'] == 1
    assert metrics[f'gpuguard_scan_gpu_hours_at_risk_per_day{{namespace="{env.ns}"}}'] >= 24
    assert metrics[f'gpuguard_scan_accelerators{{class="training",namespace="{env.ns}",resource="nvidia.com/gpu"}}'] \
        == 1 + 3 + 4 + 1 + 2  # legacy, ddp (master and two workers), big, good, tune (two nodes)
    assert metrics["gpuguard_scan_leader"] == 1
    # judged with the node inventory from the first pass: no report written twice
    assert metrics['gpuguard_scan_report_writes_total{operation="update"}'] == 0
    assert metrics['gpuguard_scan_report_writes_total{operation="create"}'] == 5


def test_the_scan_logs_one_json_object_a_line_as_the_server_does(env: Env) -> None:
    """One log pipeline parses both Deployments: every line the scan writes is a JSON object with the server's
    fields (ts, level, logger, msg), the scan's own events among them."""
    env.scan.wait_metric("gpuguard_scan_full_passes_total", lambda v: v >= 1)
    lines = [line for line in env.scan.log.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]
    assert entries and all({"ts", "level", "logger", "msg"} <= set(e) for e in entries), lines[:5]
    assert any(e["logger"].startswith("gpuguard.scan") for e in entries), lines[:5]


def test_a_released_lease_is_taken_by_the_stand_by_at_once_and_the_old_holder_stands_by(env: Env) -> None:
    """What the client library's election can't do (tests/unit/scan/test_lease_choice.py): a clean shutdown
    hands over in one round instead of a lease duration, and the one that let go is a candidate again."""
    from gpuguard.webhook.cli.audit.cluster import connect
    from gpuguard.webhook.scan.lease import Lease

    api = connect(str(env.cp.kubeconfig), None).api
    a = Lease(api, env.ns, "handover", "a", duration=30)
    b = Lease(api, env.ns, "handover", "b", duration=30)
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
    started = time.monotonic()
    a.release()
    assert b.try_acquire_or_renew(), "the stand-by did not take the released lease"
    handover = time.monotonic() - started
    print(f"\n[e2e] lease handover after release: {handover:.2f} s (the lease duration is 30 s)")
    assert not a.try_acquire_or_renew() and not a.leading  # a stands by while b leads
    spec = env.cp.kubectl_json("get", "lease", "handover", "-n", env.ns)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_the_scan_deployment_and_service_are_accepted_by_the_apiserver(env: Env) -> None:
    applied = env.cp.kubectl("apply", "-k", str(ROOT / "deploy" / "scan"), "--dry-run=server", "-o", "name")
    assert {"deployment.apps/gpuguard-scan", "service/gpuguard-scan-metrics",
            "clusterrole.rbac.authorization.k8s.io/gpuguard-scan"} <= set(applied.stdout.split())


def test_the_report_follows_a_change_of_the_workload(env: Env) -> None:
    env.wait_result("ddp", "gang-scheduling", "fail")
    patch = {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 3}}}}
    env.cp.kubectl("--as=alice", "patch", "pytorchjob", "ddp", "-n", env.ns, "--type=merge", "-p", json.dumps(patch))
    env.wait_result("ddp", "gang-scheduling", "pass")


def test_the_report_follows_a_change_of_the_runtime_a_trainjob_names(env: Env) -> None:
    gang = env.wait_result("tune", "gang-scheduling", "fail", "runtime ClusterTrainingRuntime torch-scan")
    assert gang["resources"][0]["kind"] == "TrainJob"
    env.cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(_runtime(gang=True)))
    env.wait_result("tune", "gang-scheduling", "pass")


def test_the_report_follows_the_config_and_unchanged_reports_are_not_rewritten(env: Env) -> None:
    env.wait_result("legacy", "checkpoint-volume", "fail")
    big_before = env.reports()["big"]["metadata"]["resourceVersion"]
    passes = env.scan.metrics()["gpuguard_scan_full_passes_total"]
    text = env.config.read_text()
    marker = "  checkpoint-volume:\n    action: enforce"
    assert marker in text
    env.config.write_text(text.replace(marker, "  checkpoint-volume:\n    action: warn"))
    warned = env.wait_result("legacy", "checkpoint-volume", "warn")
    assert warned["severity"] == "medium" and warned["properties"]["action"] == "warn"
    env.scan.wait_metric("gpuguard_scan_full_passes_total", lambda v: v > passes)
    assert env.reports()["big"]["metadata"]["resourceVersion"] == big_before  # same content: no write
    env.config.write_text(text)
    env.wait_result("legacy", "checkpoint-volume", "fail")


def test_the_report_follows_the_nodes_of_the_inventory(env: Env) -> None:
    env.wait_result("big", "schedulable", "fail", "(NVIDIA-L4")
    _set_node(env.cp, "NVIDIA-A100-SXM4-80GB", 2)  # the product label the inventory names groups by
    env.wait_result("big", "schedulable", "fail", "(NVIDIA-A100-SXM4-80GB")
    _set_node(env.cp, "NVIDIA-A100-SXM4-80GB", 8)  # a node that can host it
    env.wait_result("big", "schedulable", "pass")
    env.wait_result("big", "gpu-request-shape", "pass")


def test_a_report_someone_edits_or_deletes_is_restored(env: Env) -> None:
    """A tenant with the default ``edit`` role can't edit reports (the aggregated roles don't reach the CRD);
    whoever can — a namespace admin, as alice is here — doesn't keep the edit."""
    env.cp.kubectl("create", "rolebinding", "bob-edit", "--clusterrole=edit", "--user=bob", "-n", env.ns)
    for user, expected in (("bob", "no"), ("alice", "yes")):
        can = env.cp.kubectl("auth", "can-i", "update", "policyreports.wgpolicyk8s.io", "-n", env.ns,
                             f"--as={user}", check=False)
        assert can.stdout.strip() == expected, (user, can.stdout)
    env.wait_result("legacy", "checkpoint-volume", "fail")
    report = env.reports()["legacy"]
    forged = {**report, "results": [{**r, "result": "pass"} for r in report["results"]],
              "summary": {"pass": len(report["results"]), "fail": 0, "warn": 0, "error": 0, "skip": 0}}
    env.cp.kubectl("--as=alice", "replace", "-f", "-", input=json.dumps(forged))  # an admin's hand, the annotation kept
    env.wait_result("legacy", "checkpoint-volume", "fail", timeout=30)
    env.scan.wait_metric("gpuguard_scan_reports_restored_total", lambda v: v >= 1)
    name = env.reports()["legacy"]["metadata"]["name"]
    env.cp.kubectl("--as=alice", "delete", "policyreport", name, "-n", env.ns)
    env.wait_result("legacy", "checkpoint-volume", "fail", timeout=30)
    env.scan.wait_metric("gpuguard_scan_reports_restored_total", lambda v: v >= 2)


def test_a_workload_larger_than_the_scan_keeps_is_read_again_and_reported(env: Env) -> None:
    """Past 64 KiB of cleaned JSON the scan keeps a digest, and reads the object again to judge it."""
    sweep = [{"name": f"SWEEP_{i}", "value": "v" * 1000} for i in range(100)]
    big = _job(env.ns, "big-env", 1, container={"env": sweep, "volumeMounts": [
        {"name": "ckpt", "mountPath": "/checkpoints"}]},
        volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}])
    applied = env.tenant.apply(big)  # through the webhook: admitted in its shape
    assert applied.returncode == 0, applied.stderr
    env.wait_result("big-env", "checkpoint-volume", "pass")
    env.scan.wait_metric("gpuguard_scan_workloads_read_again_total", lambda v: v >= 1)


def test_the_scan_writes_openreports_when_asked(env: Env) -> None:
    """``--report-api openreports``: the same verdicts as openreports.io/v1alpha1 Reports, which the apiserver
    validates against CRDs written from the API's field list (a second scan with its own Lease)."""
    crds = ROOT / "tests" / "support" / "openreports" / "crds.yaml"
    env.cp.kubectl("apply", "-f", str(crds))
    env.cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds), timeout=70)
    # its own Lease, which the scan's RBAC does not name: run with the admin's kubeconfig (the RBAC for the
    # openreports.io reports is held by tests/unit/project/test_scan_deploy.py)
    other = ScanProcess(env.workdir, env.cp.kubeconfig, env.config, "scan-openreports", "--report-api", "openreports",
                        "--lease-name", "gpuguard-scan-openreports", "--lease-namespace", "gpuguard").start()
    try:
        def legacy() -> dict | None:
            items = env.cp.kubectl_json("get", "reports.openreports.io", "-n", env.ns)["items"]
            return next((r for r in items if r["scope"]["name"] == "legacy"), None)

        report = env.cp.wait_for(legacy, timeout=90, interval=1, message="legacy's OpenReport")
        assert report["apiVersion"] == "openreports.io/v1alpha1" and report["source"] == "gpuguard"
        fails = [r["policy"] for r in report["results"] if r["result"] == "fail"]
        assert "checkpoint-volume" in fails
        same = env.reports()["legacy"]
        assert sorted((r["policy"], r["result"]) for r in report["results"]) == \
            sorted((r["policy"], r["result"]) for r in same["results"])
    finally:
        other.stop()


def test_deleting_a_workload_removes_its_report(env: Env) -> None:
    env.cp.wait_for(lambda: "legacy" in env.reports(), timeout=60)
    env.cp.kubectl("--as=alice", "delete", "job", "legacy", "-n", env.ns, "--wait=false")
    env.cp.wait_for(lambda: "legacy" not in env.reports(), timeout=30, message="legacy's report removed")
    assert "ddp" in env.reports()


def test_two_scanners_write_once_and_the_stand_by_takes_over(env: Env) -> None:
    env.scan.wait_metric("gpuguard_scan_leader", lambda v: v == 1)
    other = ScanProcess(env.workdir, env.kubeconfig, env.config, "scan-b").start()
    try:
        other.wait_metric("gpuguard_scan_leader", lambda v: v == 0)
        lease = env.cp.kubectl_json("get", "lease", "gpuguard-scan", "-n", "gpuguard")
        assert lease["spec"]["holderIdentity"] == "scan-a"
        env.tenant.apply(_checkpointed(env.ns, "second"))
        uid = env.cp.kubectl_json("get", "job", "second", "-n", env.ns)["metadata"]["uid"]
        env.cp.wait_for(lambda: "second" in env.reports(), timeout=60)
        time.sleep(3)  # both replicas have seen it: still exactly one report about it, and B wrote nothing
        items = env.cp.kubectl_json("get", "policyreports", "-n", env.ns)["items"]
        assert [r["scope"]["uid"] for r in items].count(uid) == 1
        stand_by = other.metrics()
        assert stand_by["gpuguard_scan_leader"] == 0
        assert stand_by['gpuguard_scan_report_writes_total{operation="create"}'] == 0
        assert not [k for k in stand_by if k.startswith("gpuguard_scan_findings{")]

        env.scan.kill()  # no release: B waits for the lease to expire, then leads
        other.wait_metric("gpuguard_scan_leader", lambda v: v == 1, timeout=60)
        other.wait_metric("gpuguard_scan_full_passes_total", lambda v: v >= 1)
        env.tenant.apply(_checkpointed(env.ns, "third"))
        env.cp.wait_for(lambda: "third" in env.reports(), timeout=60, message="the new leader writes")
        taken_over = other.metrics()
        # it found the reports A wrote and rewrote none of them: one create, for the new workload
        assert taken_over['gpuguard_scan_report_writes_total{operation="create"}'] == 1
        assert taken_over['gpuguard_scan_report_writes_total{operation="update"}'] == 0
        assert env.cp.kubectl_json("get", "lease", "gpuguard-scan", "-n", "gpuguard")["spec"][
            "holderIdentity"] == "scan-b"
    finally:
        other.stop()


def test_the_watch_lists_in_pages_and_an_expired_resource_version_lists_again(env: Env) -> None:
    from gpuguard.kubeapi import client as kubeapi
    from gpuguard.kubeapi.watch import Gone, ResourceWatch

    ns = env.tenant.namespace()
    for i in range(5):
        env.cp.kubectl("create", "configmap", f"cm{i}", "-n", ns, "--from-literal=k=v")
    events: list[tuple[str, str]] = []
    synced: list[set] = []
    api = kubeapi.connect(str(env.cp.kubeconfig)).api
    watch = ResourceWatch(api, f"/api/v1/namespaces/{ns}/configmaps",
                          lambda kind, obj: events.append((kind, obj["metadata"]["name"])), synced.append, page_size=2)
    gets = kubeapi.REQUESTS.get("get", 0)
    version = watch.list()
    # 5 objects (and kube-root-ca.crt once the controller made it) in pages of 2
    assert kubeapi.REQUESTS["get"] - gets == 3
    names = {name for _, name in events}
    assert {f"cm{i}" for i in range(5)} <= names and synced == [{(ns, n) for n in names}]
    assert int(version) > 1
    # etcd compacted past it, as the apiserver does every few minutes: a resourceVersion from before is gone (the
    # module's apiserver asks etcd itself for ConfigMaps), so the reflector lists again
    compaction = urllib.request.Request(f"{env.cp.etcd_url}/v3/kv/compaction", method="POST",
                                        data=json.dumps({"revision": version, "physical": True}).encode())
    with urllib.request.urlopen(compaction, timeout=30) as answer:  # noqa: S310 - the test's own etcd
        assert answer.status == 200
    with pytest.raises(Gone):
        watch.watch("1")


def test_without_the_policyreport_crds_the_scan_exports_metrics_and_writes_once_they_arrive(env: Env) -> None:
    from tests.support.scan_process import CRDS

    env.cp.kubectl("delete", "-f", str(CRDS), "--wait=true", timeout=120)
    late = ScanProcess(env.workdir, env.kubeconfig, env.config, "scan-c", "--resync", "3").start()
    try:
        late.wait_metric("gpuguard_scan_leader", lambda v: v == 1, timeout=60)
        late.wait_metric("gpuguard_scan_full_passes_total", lambda v: v >= 1)
        metrics = late.metrics()
        assert metrics["gpuguard_scan_report_api_served"] == 0
        assert metrics[f'gpuguard_scan_findings{{namespace="{env.ns}",policy="checkpoint-volume",result="pass"}}'] >= 1
        assert metrics['gpuguard_scan_report_writes_total{operation="create"}'] == 0
        install_report_crds(env.cp)
        late.wait_metric("gpuguard_scan_report_api_served", lambda v: v == 1, timeout=60)
        env.cp.wait_for(lambda: {"ddp", "big", "good"} <= set(env.reports()), timeout=60,
                        message="reports written once the CRDs are served")
    finally:
        late.stop()


def test_a_kind_the_scan_may_not_list_is_reported_and_does_not_hold_back_the_others(env: Env) -> None:
    from tests.support.scan_process import SCAN_DEPLOY

    role = env.cp.kubectl_json("get", "clusterrole", "gpuguard-scan")
    role["rules"] = [r for r in role["rules"] if r["apiGroups"] != ["kubeflow.org"]]
    for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        role["metadata"].pop(key, None)
    env.cp.kubectl("replace", "-f", "-", input=json.dumps(role))
    narrow = ScanProcess(env.workdir, env.kubeconfig, env.config, "scan-d").start()
    try:
        narrow.wait_metric("gpuguard_scan_leader", lambda v: v == 1, timeout=60)
        narrow.wait_metric("gpuguard_scan_full_passes_total", lambda v: v >= 1)
        metrics = narrow.metrics()
        assert metrics['gpuguard_scan_watch_failing{resource="pytorchjob.kubeflow.org"}'] == 1
        assert metrics['gpuguard_scan_watch_failing{resource="job.batch"}'] == 0
        assert metrics[f'gpuguard_scan_findings{{namespace="{env.ns}",policy="schedulable",result="pass"}}'] >= 1
        assert "ddp" in env.reports()  # unknown now, not gone: its report is not swept
    finally:
        narrow.stop()
        env.cp.kubectl("apply", "-f", str(SCAN_DEPLOY / "rbac.yaml"))
