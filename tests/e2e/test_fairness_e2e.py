"""One tenant's flood of heavy dry runs does not make another tenant's GPU Job fail (fair queuing per requester).

Through a real apiserver every review comes from the same address: only the requester in the review tells the
tenants apart.  A ServiceAccount of ``team-a`` sends 96 parallel server-side dry-run creates of a GPU Job
carrying about 1 MB of environment, twice; meanwhile alice applies an ordinary GPU Job in her namespace.  Her
Job is created and mutated; every dry run of the flood is either judged or refused by gpuguard with a 429 that
names the requester and the limit, or fails on its own account; alice's apply never does.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import yaml

from tests.support.gpuguard_process import DEFAULT_CONFIG, ROOT, GpuguardServer

pytestmark = pytest.mark.e2e
USER = "alice"
FLOOD = 96


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    cp = control_plane
    cp.kubectl("apply", "-f", str(ROOT / "deploy" / "base" / "priorityclasses.yaml"))
    server = GpuguardServer(tmp_path_factory.mktemp("gpuguard-fairness"), DEFAULT_CONFIG.read_text(),
                            kubeconfig=cp.kubeconfig)
    server.start()
    server.register(cp)
    yield cp
    server.stop()
    print(f"\n[e2e] gpuguard log: {server.log}")


def _namespace(cp, prefix: str, subject: str) -> str:
    """A namespace where ``subject`` (``--user=…`` or ``--serviceaccount=NS:NAME``, NS being this one) may edit."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", ns)
    cp.kubectl("create", "rolebinding", "edit", "--clusterrole=edit", subject.replace("{ns}", ns), "-n", ns)
    return ns


def _job(ns: str, name: str, env_bytes: int = 0) -> dict:
    container = {"name": "trainer", "image": "ghcr.io/example/train:1", "command": ["torchrun", "train.py"],
                 "env": [{"name": "CHECKPOINT_URI", "value": "s3://bucket/ckpt"}],
                 "resources": {"limits": {"nvidia.com/gpu": 1}}}
    container["env"] += [{"name": f"SWEEP_{i}", "value": "v" * 240} for i in range(env_bytes // 256)]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"backoffLimit": 1, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def test_a_flood_of_heavy_dry_runs_does_not_fail_another_tenants_gpu_job(cluster):
    cp = cluster
    flooder_ns = _namespace(cp, "team-a", "--serviceaccount={ns}:sweeper")
    cp.kubectl("create", "serviceaccount", "sweeper", "-n", flooder_ns)
    flooder = f"system:serviceaccount:{flooder_ns}:sweeper"
    alice_ns = _namespace(cp, "team-b", f"--user={USER}")
    heavy = _job(flooder_ns, "sweep", env_bytes=1024 * 1024)
    answers: list[tuple[int, str]] = []

    def dry_run() -> None:
        for _ in range(2):
            status, body = cp.request("POST", f"/apis/batch/v1/namespaces/{flooder_ns}/jobs?dryRun=All", heavy,
                                      as_user=flooder, timeout=120)
            answers.append((status, body.get("message", "") if isinstance(body, dict) else str(body)))

    threads = [threading.Thread(target=dry_run) for _ in range(FLOOD)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the flood is in flight
    started = time.monotonic()
    applied = cp.kubectl(f"--as={USER}", "apply", "-f", "-", input=yaml.safe_dump(_job(alice_ns, "finetune")),
                         check=False, timeout=120)
    took = time.monotonic() - started
    for thread in threads:
        thread.join()
    print(f"\n[e2e] alice's apply took {took:.1f} s beside {FLOOD} x 2 heavy dry runs; flood answers: "
          f"{sorted({s for s, _ in answers})}")

    assert applied.returncode == 0, applied.stderr
    stored = cp.kubectl_json("get", "job", "finetune", "-n", alice_ns)
    tolerations = stored["spec"]["template"]["spec"].get("tolerations", [])
    assert any(t.get("key") == "nvidia.com/gpu" for t in tolerations), "alice's Job was judged and mutated"

    assert len(answers) == 2 * FLOOD
    refused = [message for status, message in answers if status == 429]
    for message in refused:  # gpuguard's own refusals: at once, naming the requester and the limit
        assert flooder in message and ("--requester-queue" in message or "waited" in message), message
    # The rest of the flood was judged or failed on its own account (the apiserver's and gpuguard's read
    # timeouts on 192 one-megabyte bodies through two cores): the flooder's requests, never alice's.
    print("[e2e] flood, by status:", {s: sum(1 for t, _ in answers if t == s) for s in sorted({t for t, _ in answers})},
          "; a failure:", next((m[:300] for t, m in answers if t not in (200, 201, 429)), "none"))
