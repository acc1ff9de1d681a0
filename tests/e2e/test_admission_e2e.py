"""gpuguard behind a real kube-apiserver, driven with the machine's kubectl.

Every test reads back what the apiserver stored or printed.  Order matters only for the
last tests, which edit the config file and finally stop gpuguard.
"""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest
import yaml

from tests.support.gpuguard_process import ROOT, GpuguardServer, default_config_with, gpuguard

pytestmark = pytest.mark.e2e
EXEMPT_NS = "e2e-exempt"


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    """The control plane with gpuguard serving, registered, PriorityClasses and CRDs applied."""
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    cp.install_crds("pytorchjob", "jobset")
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard"), default_config_with(EXEMPT_NS))
    server.start()
    server.register(cp)
    # The apiserver may need a moment before the new webhook configuration is in force.
    cp.wait_for(lambda: _denied_probe(cp), timeout=60, message="gpuguard webhooks in force")
    yield cp, server
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


def _denied_probe(cp) -> bool:
    ns = new_namespace(cp)
    result = cp.kubectl("apply", "-f", "-", input=gpu_job(ns, "probe", pvc=False), check=False)
    return result.returncode != 0 and "checkpoint-volume" in result.stderr


def new_namespace(cp, name: str | None = None) -> str:
    ns = name or f"e2e-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    return ns


def gpu_job(ns: str, name: str, pvc: bool, annotations: dict | None = None) -> str:
    container = {"name": "trainer", "image": "ghcr.io/example/train:1", "command": ["python", "train.py"],
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if pvc:
        container["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
        spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    meta: dict = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = annotations
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                           "spec": {"template": {"spec": spec}}})


def get(cp, *args: str) -> dict:
    return cp.kubectl_json("get", *args)


def assert_gpu_mutations(pod_spec: dict) -> None:
    gpu_tolerations = [t for t in pod_spec["tolerations"] if t.get("key") == "nvidia.com/gpu"]
    assert gpu_tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    # No node inventory in this cluster: the GPU label is preferred, never required (it may be on no node).
    preferred = pod_spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert {"weight": 100, "preference": {"matchExpressions": [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}} in preferred
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in pod_spec["affinity"]["nodeAffinity"]
    resources = pod_spec["containers"][0]["resources"]
    assert resources["requests"]["cpu"] == "8" and resources["limits"]["memory"] == "64Gi"
    assert pod_spec["priorityClassName"] == "training-standard"
    names = [v["name"] for v in pod_spec["volumes"]]
    assert len(names) == len(set(names)) and "dshm" in names
    mounts = [m["mountPath"] for m in pod_spec["containers"][0]["volumeMounts"]]
    assert mounts.count("/dev/shm") == 1


# 1 ---------------------------------------------------------------------------------------
def test_gpu_job_without_persistent_volume_is_rejected_with_policy_and_fix(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    result = cp.kubectl("apply", "-f", "-", input=gpu_job(ns, "no-ckpt", pvc=False), check=False)
    assert result.returncode != 0
    assert 'admission webhook "batch.validate.gpuguard.io" denied the request' in result.stderr
    assert "[checkpoint-volume] spec.template.spec.containers[0] (trainer)" in result.stderr
    assert "mount a persistentVolumeClaim (e.g. at /checkpoints)" in result.stderr
    assert cp.kubectl("get", "job", "no-ckpt", "-n", ns, check=False).returncode != 0


# 2 ---------------------------------------------------------------------------------------
def test_gpu_job_with_pvc_is_mutated_and_its_pods_too_without_duplicates(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    cp.kubectl("apply", "-f", "-", input=gpu_job(ns, "train", pvc=True))
    job = get(cp, "job", "train", "-n", ns)
    assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert job["spec"]["backoffLimit"] == 3 and job["spec"]["activeDeadlineSeconds"] == 86400
    assert "gpu-tolerations" in job["metadata"]["annotations"]["gpuguard.io/mutated-by"]
    assert_gpu_mutations(job["spec"]["template"]["spec"])
    pods = cp.wait_for(lambda: get(cp, "pods", "-n", ns, "-l", "job-name=train")["items"], timeout=90,
                       message="kube-controller-manager creates the Job's pod")
    pod = pods[0]
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert_gpu_mutations(pod["spec"])
    assert pod["spec"]["priority"] == 10000


def _one_pass_counts(server: GpuguardServer) -> tuple[float, float]:
    samples = server.metrics()
    return (samples.get('gpuguard_create_validations_total{result="reused"}', 0.0),
            samples.get('gpuguard_create_validations_total{result="evaluated"}', 0.0))


def test_a_create_is_evaluated_once_through_the_real_apiserver(cluster):
    """The validating review of a create receives what /mutate returned, as the apiserver keeps it after its own
    stamping (a uid, a Job's selector): it reuses the mutating review's evaluation (``webhook/server/onepass.py``).
    Whatever the apiserver changes after gpuguard (a Pod's requests defaulted from the limits gpuguard set) is
    evaluated in full, never taken as seen.  The counts are printed: the share a real apiserver lets through is a
    figure."""
    cp, server = cluster
    ns = new_namespace(cp)
    reused, evaluated = _one_pass_counts(server)
    cp.kubectl("apply", "-f", "-", input=gpu_job(ns, "once", pvc=True))
    job_reused, job_evaluated = _one_pass_counts(server)
    assert (job_reused - reused, job_evaluated - evaluated) == (1, 0)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "once", "namespace": ns}, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "trainer", "image": "ghcr.io/example/train:1", "env": [{"name": "CHECKPOINT_URI",
                                                                              "value": "s3://team/ckpt"}],
            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    unchanged = server.metrics().get("gpuguard_create_mutations_unchanged_total", 0.0)
    cp.kubectl("apply", "-f", "-", input=json.dumps(pod))
    pod_reused, pod_evaluated = _one_pass_counts(server)
    reinvoked = server.metrics().get("gpuguard_create_mutations_unchanged_total", 0.0) - unchanged
    print(f"\n[e2e] one pass: Job create reused {job_reused - reused:g}; bare Pod reused "
          f"{pod_reused - job_reused:g}, evaluated {pod_evaluated - job_evaluated:g}; its reinvocation answered "
          f"unchanged {reinvoked:g}")
    assert pod_reused - job_reused + pod_evaluated - job_evaluated == 1  # the Pod's one validating review
    # gpuguard named the Pod's priority class; the apiserver's Priority admission set its priority and called
    # gpuguard again with what it had returned: answered from the first evaluation, not evaluated again
    assert (reinvoked, pod_reused - job_reused) == (1, 1)


# 3 ---------------------------------------------------------------------------------------
def test_bare_gpu_pod_gets_priority_class_and_matching_priority(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    pod = textwrap.dedent(f"""\
        apiVersion: v1
        kind: Pod
        metadata: {{name: bare, namespace: {ns}}}
        spec:
          restartPolicy: Never
          containers:
          - name: trainer
            image: ghcr.io/example/train:1
            env: [{{name: CHECKPOINT_URI, value: "s3://team/ckpt"}}]
            resources: {{limits: {{nvidia.com/gpu: 1}}}}
        """)
    cp.kubectl("apply", "-f", "-", input=pod)
    stored = get(cp, "pod", "bare", "-n", ns)
    assert stored["spec"]["priorityClassName"] == "training-standard"
    assert stored["spec"]["priority"] == 10000
    assert stored["spec"]["activeDeadlineSeconds"] == 86400


# 4 ---------------------------------------------------------------------------------------
def test_server_dry_run_shows_mutation_and_stores_nothing(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    result = cp.kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-", input=gpu_job(ns, "dry", pvc=True))
    shown = json.loads(result.stdout)
    assert_gpu_mutations(shown["spec"]["template"]["spec"])
    assert cp.kubectl("get", "job", "dry", "-n", ns, check=False).returncode != 0


# 5 ---------------------------------------------------------------------------------------
def test_warn_policy_admits_and_kubectl_prints_warning(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    deployment = textwrap.dedent(f"""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: llm, namespace: {ns}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: llm}}}}
          template:
            metadata: {{labels: {{app: llm}}}}
            spec:
              nodeSelector: {{karpenter.sh/capacity-type: spot}}
              containers:
              - name: server
                image: vllm/vllm-openai:v0.6.0
                resources: {{limits: {{nvidia.com/gpu: 1}}}}
        """)
    result = cp.kubectl("apply", "-f", "-", input=deployment)
    assert "Warning: [inference-on-spot]" in result.stderr
    stored = get(cp, "deployment", "llm", "-n", ns)
    assert stored["spec"]["template"]["spec"]["priorityClassName"] == "inference-critical"


# 6 ---------------------------------------------------------------------------------------
def pytorchjob(ns: str, name: str, scheduler: str | None, min_member: int | None = None) -> str:
    spec: dict = {"containers": [{"name": "pytorch", "image": "ghcr.io/example/ddp:1",
                                  "env": [{"name": "CHECKPOINT_URI", "value": "s3://team/ckpt"}],
                                  "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    meta: dict = {"name": name, "namespace": ns}
    if min_member:  # Volcano's PodGroup for the job must hold every GPU pod
        meta["annotations"] = {"scheduling.volcano.sh/group-min-member": str(min_member)}
    return yaml.safe_dump({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
        "spec": {"runPolicy": {}, "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": spec}},
            "Worker": {"replicas": 4, "template": {"spec": spec}}}}})


def test_pytorchjob_needs_gang_scheduler_and_every_replica_is_mutated(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    rejected = cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "ddp", None), check=False)
    assert rejected.returncode != 0 and "[gang-scheduling]" in rejected.stderr
    assert "5 GPU pods is not gang-scheduled (no gang scheduler)" in rejected.stderr
    # schedulerName volcano alone is a PodGroup of one: still not a gang.
    alone = cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "ddp", "volcano"), check=False)
    assert alone.returncode != 0 and "PodGroup of one" in alone.stderr
    cp.kubectl("apply", "-f", "-", input=pytorchjob(ns, "ddp", "volcano", min_member=5))
    stored = get(cp, "pytorchjob", "ddp", "-n", ns)
    assert stored["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 86400
    for role in ("Master", "Worker"):
        spec = stored["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["priorityClassName"] == "training-standard"
        assert spec["schedulerName"] == "volcano"


# 6b --------------------------------------------------------------------------------------
def test_jobset_with_kueue_queue_is_admitted_and_every_replicated_job_mutated(cluster):
    cp, _ = cluster
    ns = new_namespace(cp)
    pod_spec = {"restartPolicy": "Never", "containers": [{
        "name": "trainer", "image": "ghcr.io/example/jax:1", "env": [{"name": "CHECKPOINT_URI", "value": "gs://b/c"}],
        "resources": {"limits": {"nvidia.com/gpu": 8}}}]}
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "llm", "namespace": ns},
              "spec": {"replicatedJobs": [
                  {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2,
                                                                           "template": {"spec": pod_spec}}}}]}}
    rejected = cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(jobset), check=False)
    assert rejected.returncode != 0 and "[gang-scheduling] spec: " in rejected.stderr
    assert "distributed GPU job with 4 GPU pods" in rejected.stderr  # the reason, whole on its "why:" line
    jobset["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue"}
    cp.kubectl("apply", "-f", "-", input=yaml.safe_dump(jobset))
    stored = get(cp, "jobset", "llm", "-n", ns)
    assert stored["spec"]["ttlSecondsAfterFinished"] == 86400
    spec = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["requests"]["cpu"] == "64"
    assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]


# 7 ---------------------------------------------------------------------------------------
def test_exempt_namespace_passes_untouched_but_user_annotation_does_not_exempt(cluster):
    cp, _ = cluster
    exempt = new_namespace(cp, f"{EXEMPT_NS}")
    cp.kubectl("apply", "-f", "-", input=gpu_job(exempt, "free", pvc=False))
    stored = get(cp, "job", "free", "-n", exempt)
    assert "tolerations" not in stored["spec"]["template"]["spec"]
    assert "gpuguard.io/mutated-by" not in stored["metadata"].get("annotations", {})
    ns = new_namespace(cp)
    sneaky = gpu_job(ns, "sneaky", pvc=False, annotations={"gpuguard.io/exempt": "true",
                                                           "gpuguard.io/skip-policies": "checkpoint-volume"})
    result = cp.kubectl("apply", "-f", "-", input=sneaky, check=False)
    assert result.returncode != 0 and "[checkpoint-volume]" in result.stderr


# 8 ---------------------------------------------------------------------------------------
def test_config_change_applies_to_next_decision_and_broken_edit_keeps_old(cluster):
    cp, server = cluster
    original = server.config.read_text()
    ns = new_namespace(cp)
    try:
        relaxed = original.replace("  checkpoint-volume:\n    action: enforce",
                                   "  checkpoint-volume:\n    action: warn")
        assert relaxed != original
        server.config.write_text(relaxed)

        def admitted(name: str):
            result = cp.kubectl("apply", "-f", "-", input=gpu_job(ns, name, pvc=False), check=False)
            return result if result.returncode == 0 else None

        result = cp.wait_for(lambda: admitted(f"relaxed-{uuid.uuid4().hex[:6]}"), timeout=30,
                             message="the relaxed config in force")
        assert "Warning: [checkpoint-volume]" in result.stderr

        refused = "config not reloaded; the previous config stays in force"
        refusals_before = server.log_count(refused)
        server.config.write_text(relaxed + "\npolicies: [this is: not valid\n")
        cp.wait_for(lambda: server.log_count(refused) > refusals_before, timeout=30,
                    message="the broken config noticed and logged")
        assert f"{server.config}:" in server.log.read_text()  # the log names file and line
        still = cp.kubectl("apply", "-f", "-", input=gpu_job(ns, "after-broken", pvc=False), check=False)
        assert still.returncode == 0, "a broken config edit must leave the old config in force"
    finally:
        server.config.write_text(original)
    cp.wait_for(lambda: cp.kubectl("apply", "-f", "-", input=gpu_job(ns, f"restored-{uuid.uuid4().hex[:6]}", pvc=False),
                                   check=False).returncode != 0, timeout=30, message="original config back")


# 9 ---------------------------------------------------------------------------------------
def test_failure_policy_fail_blocks_and_ignore_admits_when_gpuguard_is_down(cluster):
    cp, server = cluster
    ns = new_namespace(cp)
    server.stop()
    pod = yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "while-down", "namespace": ns},
                          "spec": {"containers": [{"name": "t", "image": "x",
                                                   "resources": {"limits": {"nvidia.com/gpu": 1}}}]}})
    blocked = cp.kubectl("apply", "-f", "-", input=pod, check=False)
    assert blocked.returncode != 0
    assert "failed calling webhook" in blocked.stderr
    server.register(cp, failure_policy="Ignore")
    admitted = cp.wait_for(lambda: cp.kubectl("apply", "-f", "-", input=pod, check=False).returncode == 0,
                           timeout=30, message="Ignore admits while gpuguard is down")
    assert admitted
    stored = get(cp, "pod", "while-down", "-n", ns)
    assert "tolerations" not in stored["spec"] or not any(
        t.get("key") == "nvidia.com/gpu" for t in stored["spec"]["tolerations"])
    gpuguard("webhook-config", "--url", server.url, "--ca", str(server.ca))  # still renders after the test
