"""The documented grant recipe, followed as an admin and an ordinary user would, on the shipped config
(and, on the same server, shared-rwo-claim reading claims from the cluster).

The admin labels a namespace ``gpuguard.io/profile=serving`` (the README's and admin guide's command, read
from README.md); alice, who may edit workloads in her namespaces but not label them, applies a vLLM
Deployment in it and in one that nobody labelled.  The server in the serving namespace gets the preempting
``inference-critical``, the other the non-preempting ``inference-standard``; setting ``inference-critical``
by hand is accepted only where granted; and the grant lowers no check (a training Job without checkpoints
is denied in both).
"""

from __future__ import annotations

import re
import shlex
import uuid

import pytest
import yaml

from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, GpuguardServer

pytestmark = pytest.mark.e2e
USER = "alice"


def _documented_label(ns: str) -> list[str]:
    """The README's ``kubectl label namespace … gpuguard.io/profile=serving`` line, for ``ns``."""
    line = next(m for m in re.findall(r"^kubectl label namespace .*$", (ROOT / "README.md").read_text(), re.M)
                if "profile=serving" in m)
    words = shlex.split(line.split("#", 1)[0])
    return [*words[1:3], ns, *words[4:]]


def _vllm(ns: str, priority: str | None = None) -> dict:
    spec: dict = {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.9.2",
                                  "command": ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"],
                                  "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    if priority:
        spec["priorityClassName"] = priority
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qwen", "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "qwen"}},
                     "template": {"metadata": {"labels": {"app": "qwen"}}, "spec": spec}}}


def _training_job(ns: str) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "finetune", "namespace": ns},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "trainer", "image": "ghcr.io/example/train:1", "command": ["torchrun", "train.py"],
                "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-grants"), DEFAULT_CONFIG.read_text(),
                            kubeconfig=cp.kubeconfig, extra_args=("--namespace-labels",))
    server.start()
    server.register(cp)
    yield cp
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


def _namespace(cp) -> str:
    ns = f"serve-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", ns)
    return ns


def _apply(cp, obj: dict):
    return cp.kubectl(f"--as={USER}", "apply", "-f", "-", input=yaml.safe_dump(obj), check=False)


def _priority(cp, ns: str) -> str:
    return cp.kubectl_json("get", "deployment", "qwen", "-n", ns)["spec"]["template"]["spec"].get(
        "priorityClassName", "")


def test_the_documented_label_grants_preemption_to_servers_and_nothing_else(cluster):
    cp = cluster
    granted, plain = _namespace(cp), _namespace(cp)
    # alice can't grant herself: labelling a namespace is the admin's act
    assert cp.kubectl(f"--as={USER}", *_documented_label(granted), check=False).returncode != 0
    cp.kubectl(*_documented_label(granted))
    # the server learns the label from its namespace watch: wait until a server there is granted
    cp.wait_for(lambda: _apply(cp, _vllm(granted)).returncode == 0 and _priority(cp, granted) == "inference-critical",
                timeout=60, interval=1, message="the serving profile in force")
    assert _apply(cp, _vllm(plain)).returncode == 0
    assert _priority(cp, plain) == "inference-standard"

    # naming the preempting class by hand: only where granted
    denied = _apply(cp, {**_vllm(plain, "inference-critical"), "metadata": {"name": "qwen-hi", "namespace": plain}})
    assert denied.returncode != 0 and "[priority-abuse]" in denied.stderr, denied.stderr
    named = _apply(cp, {**_vllm(granted, "inference-critical"), "metadata": {"name": "qwen-hi", "namespace": granted}})
    assert named.returncode == 0, named.stderr

    # the grant lowers no check: a training Job without checkpoints is denied in both
    for ns in (granted, plain):
        job = _apply(cp, _training_job(ns))
        assert job.returncode != 0 and "[checkpoint-volume]" in job.stderr, (ns, job.stderr)


def _pvc(ns: str, name: str, mode: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "100Gi"}}}}


def _parallel_job(ns: str, name: str, claim: str) -> dict:
    job = _training_job(ns)
    job["metadata"]["name"] = name
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "training"}  # ganged: gang-scheduling is content
    job["spec"].update({"parallelism": 2, "completions": 2})
    pod = job["spec"]["template"]["spec"]
    pod["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/checkpoints"}]
    pod["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": claim}}]
    return job


def test_shared_claims_are_judged_by_the_access_modes_the_cluster_holds(cluster):
    """shared-rwo-claim reads each claim from the cluster: ReadWriteOnce warns (the pods may land apart),
    ReadWriteOncePod denies (one pod only), ReadWriteMany is fine, and a claim not there is said to be not
    fully checked."""
    cp = cluster
    ns = _namespace(cp)
    for name, mode in (("rwo", "ReadWriteOnce"), ("rwop", "ReadWriteOncePod"), ("rwx", "ReadWriteMany")):
        created = _apply(cp, _pvc(ns, name, mode))
        assert created.returncode == 0, created.stderr
    rwo = _apply(cp, _parallel_job(ns, "on-rwo", "rwo"))
    assert rwo.returncode == 0 and "2 pods mount ReadWriteOnce claim 'rwo'" in rwo.stderr, rwo.stderr
    rwop = _apply(cp, _parallel_job(ns, "on-rwop", "rwop"))
    assert rwop.returncode != 0 and "[shared-rwo-claim]" in rwop.stderr and "ReadWriteOncePod" in rwop.stderr
    rwx = _apply(cp, _parallel_job(ns, "on-rwx", "rwx"))
    assert rwx.returncode == 0 and "shared-rwo-claim" not in rwx.stderr, rwx.stderr
    missing = _apply(cp, _parallel_job(ns, "on-missing", "not-yet"))
    assert missing.returncode == 0 and "not fully checked: 2 pods mount claim 'not-yet'" in missing.stderr, \
        missing.stderr
