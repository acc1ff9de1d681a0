"""Self-managed certificates through a real kube-apiserver: the chart installed with
``certificates.mode=selfManaged``, the real server processes running as the chart's ServiceAccount.

Fresh install: the webhook configurations are installed empty and the Secret without data; the
server creates its CA and certificate, writes the webhooks with their caBundle, and the first GPU
Job alice creates is judged, with no certificate step by anyone; two replicas started at once
agree on one Secret.  A CA rotation forced by the Secret's annotation, with the serving certificate
renewed every few seconds, runs under a loop of reviews through the apiserver and of new TLS
handshakes checked against the caBundle in force, and loses none; `helm upgrade` keeps the webhooks
the server wrote, and `helm uninstall` leaves nothing.  (The cluster has no kubelet: the chart's
Deployment never runs, its webhooks point by URL at the processes the test starts.)
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
import yaml

from tests.support.builders import bare_pod_spec, make, pvc_pod_spec
from tests.support.cluster.controlplane import free_port
from tests.support.gpuguard_process import DEFAULT_CONFIG
from tests.support.helm import CHART, helm
from tests.support.selfmanaged_process import SelfManagedServer, service_account_kubeconfig

pytestmark = pytest.mark.e2e
NS = "gpuguard"
USER = "alice"
KINDS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
# Short lives so that renewals happen during the test; the CA rotation is forced by annotation.
# A renewal must reach every replica well within the last third of a certificate's life: with 6 s
# (2 s to spare) a replica busy on this 2-core machine once took 1.9 s to load its renewal.
LIFETIMES = ("--serving-lifetime", "12s", "--ca-lifetime", "1h", "--ca-overlap", "2s", "--cert-check-interval", "0.5")


def _helm(cp, *args: str):
    return helm(*args, "--kubeconfig", str(cp.kubeconfig))


def _secret(cp) -> dict:
    return cp.kubectl_json("get", "secret", "gpuguard-certs", "-n", NS)


def _gpu_job(ns: str, name: str, pvc: bool) -> dict:
    return make("Job", pvc_pod_spec() if pvc else bare_pod_spec(), name=name, namespace=ns)


def _as_alice(cp, job: dict):
    return cp.kubectl(f"--as={USER}", "apply", "-f", "-", input=yaml.safe_dump(job), check=False)


@pytest.fixture(scope="module")
def install(control_plane, tmp_path_factory):
    cp = control_plane
    work = tmp_path_factory.mktemp("selfmanaged")
    port = free_port()
    _helm(cp, "install", "gpuguard", str(CHART), "--namespace", NS, "--create-namespace",
          "--set", "certificates.mode=selfManaged", "--set", f"webhook.url=https://127.0.0.1:{port}")
    kubeconfig = service_account_kubeconfig(cp, NS, "gpuguard", work / "kubeconfig")
    team = f"team-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", team)
    cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", f"--user={USER}", "-n", team)
    replicas = [SelfManagedServer(work / name, kubeconfig, DEFAULT_CONFIG, port=p, extra_args=LIFETIMES)
                for name, p in (("a", port), ("b", None))]
    yield {"team": team, "replicas": replicas}
    for replica in replicas:
        replica.stop()
        print(f"\n[e2e] gpuguard log: {replica.log}")


def test_fresh_install_admits_the_first_gpu_job_with_no_certificate_step(control_plane, install):
    cp = control_plane
    for kind in KINDS:  # installed empty: nothing points at a server yet
        assert not cp.kubectl_json("get", kind, "gpuguard").get("webhooks")
    assert not _secret(cp).get("data")

    # Both replicas start at once on the empty Secret: one create wins, the other reads it (409).
    first, second = install["replicas"]
    starts = [threading.Thread(target=replica.start) for replica in (first, second)]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join(timeout=90)
    assert first.ready() and second.ready()
    assert sum(r.log.read_text().count('"step":"create"') for r in (first, second)) == 1
    secret = _secret(cp)
    bundle = secret["data"]["ca.crt"]
    for kind in KINDS:  # ready only once its webhooks carry the CA of what it serves
        hooks = cp.kubectl_json("get", kind, "gpuguard")["webhooks"]
        assert len(hooks) >= 3 and {h["clientConfig"]["caBundle"] for h in hooks} == {bundle}
        assert {h["clientConfig"]["url"].rsplit("/", 1)[0] for h in hooks} == {first.url}

    # Alice's GPU Jobs are judged: denied without a checkpoint volume, mutated with one; never an x509 error.
    team, errors = install["team"], []

    def judged() -> bool:
        out = _as_alice(cp, _gpu_job(team, "probe", pvc=False))
        errors.append(out.stderr)
        return "checkpoint-volume" in out.stderr

    cp.wait_for(judged, timeout=30, message="the written webhooks in force")
    assert not [e for e in errors if "x509" in e or "certificate" in e], errors
    created = _as_alice(cp, _gpu_job(team, "train", pvc=True))
    assert created.returncode == 0, created.stderr
    job = cp.kubectl_json("get", "job", "train", "-n", team)
    assert "gpu-tolerations" in job["metadata"]["annotations"]["gpuguard.io/mutated-by"]


def test_two_replicas_agree_on_one_secret(control_plane, install):
    cp = control_plane
    first, second = install["replicas"]

    def agree() -> bool:
        stored = base64.b64decode(_secret(cp)["data"]["tls.crt"]).decode()
        return first.served_pem() == second.served_pem() == stored

    cp.wait_for(agree, timeout=30, message="both replicas serving the Secret's certificate")


class ReviewLoop:
    """GPU Job dry-run creates as alice through the apiserver, and new TLS handshakes to every replica
    checked against the caBundle the webhook configuration holds at that moment, until stopped."""

    def __init__(self, cp, team: str, replicas: list[SelfManagedServer]) -> None:
        self.cp, self.team, self.replicas = cp, team, replicas
        self.reviews = self.handshakes = 0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.context = ssl.create_default_context(cafile=str(cp.ca_file))
        self.threads = [threading.Thread(target=self._reviews, daemon=True) for _ in range(2)]
        self.threads.append(threading.Thread(target=self._handshakes, daemon=True))

    def _reviews(self) -> None:
        body = json.dumps(_gpu_job(self.team, "load", pvc=True)).encode()
        url = f"{self.cp.server}/apis/batch/v1/namespaces/{self.team}/jobs?dryRun=All"
        headers = {"Authorization": f"Bearer {self.cp.token}", "Impersonate-User": USER,
                   "Content-Type": "application/json"}
        while not self.stop.is_set():
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, context=self.context, timeout=30) as resp:
                    stored = json.loads(resp.read())
                if "gpuguard.io/mutated-by" not in (stored["metadata"].get("annotations") or {}):
                    self.failures.append("a review was not mutated")
            except urllib.error.HTTPError as exc:
                self.failures.append(f"HTTP {exc.code}: {exc.read()[:300]!r}")
            self.reviews += 1

    def _handshakes(self) -> None:
        while not self.stop.is_set():
            hooks = self.cp.kubectl_json("get", "validatingwebhookconfiguration", "gpuguard")["webhooks"]
            bundle = base64.b64decode(hooks[0]["clientConfig"]["caBundle"]).decode()
            context = ssl.create_default_context(cadata=bundle)
            for replica in self.replicas:
                try:
                    with context.wrap_socket(socket.create_connection(("127.0.0.1", replica.port), 5),
                                             server_hostname="127.0.0.1"):
                        pass
                except (ssl.SSLError, OSError) as exc:
                    self.failures.append(f"handshake with {replica.url} against the live caBundle: {exc}")
                self.handshakes += 1

    def __enter__(self) -> ReviewLoop:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=40)


def test_forced_ca_rotation_under_load_loses_no_review(control_plane, install):
    cp = control_plane
    replicas = install["replicas"]
    before = _secret(cp)
    serial = int(before["metadata"]["annotations"]["gpuguard.io/ca-bundle-serial"])
    old_signer = before["data"]["signer.crt"]
    renewals = {before["data"]["tls.crt"]}
    with ReviewLoop(cp, install["team"], replicas) as loop:
        # Counted, not slept for: how many a fixed pause holds depends on the machine's pace.
        cp.wait_for(lambda: loop.reviews >= 10 and loop.handshakes >= 5, timeout=60, interval=0.2,
                    message="reviews and handshakes flowing before the rotation")
        cp.kubectl("annotate", "secret", "gpuguard-certs", "-n", NS, "gpuguard.io/rotate-ca=now")

        def rotated() -> bool:
            secret = _secret(cp)
            renewals.add(secret["data"]["tls.crt"])
            annotations = secret["metadata"]["annotations"]
            return (int(annotations["gpuguard.io/ca-bundle-serial"]) == serial + 2  # staged, then retired
                    and secret["data"]["signer.crt"] != old_signer)

        cp.wait_for(rotated, timeout=60, interval=0.3, message="the CA rotated and the old one retired")
        time.sleep(4)  # the replicas reload the retired bundle's certificates; reviews keep flowing
        cp.wait_for(lambda: loop.reviews >= 20 and loop.handshakes >= 10, timeout=60, interval=0.2,
                    message="the loop's reviews and handshakes")  # a slow machine's loop gets there later
    print(f"\n[e2e] CA rotation under load: {loop.reviews} reviews, {loop.handshakes} handshakes, "
          f"{len(loop.failures)} failed, {len(renewals)} serving certificates")
    assert loop.failures == [], loop.failures[:5]
    assert loop.reviews >= 20 and loop.handshakes >= 10, (loop.reviews, loop.handshakes)
    # The serving certificate was reissued by the new CA (readiness below proves who signed it). How many
    # 12 s renewals fell inside the rotation depends on the machine's pace, so only that one is counted;
    # renewal at 2/3 of life is tested step by step in tests/unit/certs/test_selfmanaged.py.
    assert len(renewals) >= 2 and _secret(cp)["data"]["tls.crt"] != before["data"]["tls.crt"]
    secret = _secret(cp)
    assert "gpuguard.io/rotate-ca" not in secret["metadata"]["annotations"]
    new_bundle = base64.b64decode(secret["data"]["ca.crt"]).decode()
    assert new_bundle == base64.b64decode(secret["data"]["signer.crt"]).decode()  # only the new CA is trusted
    with tempfile.NamedTemporaryFile("w", suffix=".pem") as ca:
        ca.write(new_bundle)
        ca.flush()
        context = ssl.create_default_context(cafile=ca.name)
        for replica in replicas:
            with urllib.request.urlopen(f"{replica.url}/readyz", context=context, timeout=5) as resp:
                assert resp.status == 200


def test_upgrade_keeps_the_written_webhooks_and_uninstall_leaves_nothing(control_plane, install):
    cp = control_plane
    bundle = _secret(cp)["data"]["ca.crt"]
    _helm(cp, "upgrade", "gpuguard", str(CHART), "--namespace", NS, "--reuse-values",
          "--set", "webhook.timeoutSeconds=7")
    for kind in KINDS:  # the unchanged empty list in the chart wipes nothing
        hooks = cp.kubectl_json("get", kind, "gpuguard")["webhooks"]
        assert len(hooks) >= 3 and {h["clientConfig"]["caBundle"] for h in hooks} == {bundle}

    def rewritten() -> bool:  # the server writes the upgraded ConfigMap's webhooks, same caBundle
        hooks = [h for kind in KINDS for h in cp.kubectl_json("get", kind, "gpuguard")["webhooks"]]
        return {(h["timeoutSeconds"], h["clientConfig"]["caBundle"]) for h in hooks} == {(7, bundle)}

    cp.wait_for(rewritten, timeout=30, message="the upgraded webhooks written")
    for replica in install["replicas"]:
        replica.stop()
    _helm(cp, "uninstall", "gpuguard", "--namespace", NS)

    def gone() -> bool:
        left = cp.kubectl_json("get", ",".join(KINDS) + ",clusterroles,clusterrolebindings", "-l",
                               "app.kubernetes.io/name=gpuguard")["items"]
        in_ns = cp.kubectl_json("get", "secrets,configmaps,roles,rolebindings", "-n", NS, "-l",
                                "app.kubernetes.io/name=gpuguard")["items"]
        return not left and not in_ns

    cp.wait_for(gone, timeout=60, message="every gpuguard object deleted, the certificate Secret included")


@pytest.mark.parametrize("server_side", [False, True])
def test_reapplying_an_empty_webhook_list_keeps_webhooks_written_by_another_client(control_plane, server_side):
    """What the overlay relies on, for kubectl apply (client-side three-way merge) and server-side apply."""
    cp = control_plane
    name = f"gpuguard-reapply-{'ssa' if server_side else 'csa'}"
    skeleton = yaml.safe_dump({"apiVersion": "admissionregistration.k8s.io/v1",
                               "kind": "ValidatingWebhookConfiguration",
                               "metadata": {"name": name, "labels": {"test": "reapply"}}, "webhooks": []})
    apply = ["apply", "-f", "-"] + (["--server-side"] if server_side else [])
    cp.kubectl(*apply, input=skeleton)
    stored = cp.kubectl_json("get", "validatingwebhookconfiguration", name)
    stored["webhooks"] = [{
        "name": "probe.gpuguard.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Ignore", "clientConfig": {"url": "https://127.0.0.1:9/validate", "caBundle": "Zm9v"},
        "rules": [{"apiGroups": ["example.invalid"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["nothings"]}]}]
    # As the server writes: a PUT of the stored object (`kubectl replace` would also rewrite kubectl's
    # last-applied annotation, which the server leaves alone).
    request = urllib.request.Request(
        f"{cp.server}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{name}",
        data=json.dumps(stored).encode(), method="PUT",
        headers={"Authorization": f"Bearer {cp.token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=ssl.create_default_context(cafile=str(cp.ca_file)), timeout=30):
        pass
    cp.kubectl(*apply, input=skeleton)
    assert [h["name"] for h in cp.kubectl_json("get", "validatingwebhookconfiguration", name)["webhooks"]] == [
        "probe.gpuguard.io"]
    cp.kubectl("delete", "validatingwebhookconfiguration", name)
