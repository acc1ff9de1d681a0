"""webhook/server/certwatch.py: replicas sharing one Secret through an in-memory apiserver with
resourceVersion compare-and-swap, passes interleaved over simulated time.

The end-to-end test (tests/e2e/test_selfmanaged_certs_e2e.py) runs the real processes against the
real apiserver; here the interleavings are chosen, so the invariant can be checked after every
pass: what each replica serves chains to a CA that every live webhook trusts.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from gpuguard.certs import selfmanaged as sm
from gpuguard.webhook.server import certwatch

LIFE = sm.Lifetimes(ca=dt.timedelta(hours=6), serving=dt.timedelta(hours=1), overlap=dt.timedelta(minutes=5))
HOSTS = sm.Hosts(("gpuguard.gpuguard.svc",), ("127.0.0.1",))


@pytest.fixture
def t0() -> dt.datetime:
    """The simulated clock starts at the real one when the test runs (bootstrap() reads the real clock),
    never at import: on a busy machine the test may run long after collection (issue 37)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class Conflict(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _template(kind: str) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "gpuguard"},
            "webhooks": [{"name": f"{n}.gpuguard.io", "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
                          "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                                     "operations": ["CREATE", "UPDATE"]}],
                          "sideEffects": "None", "admissionReviewVersions": ["v1"]} for n in ("a", "b")]}


class FakeCluster:
    """The objects the server touches, each with a resourceVersion checked on every write."""

    error = Conflict

    def __init__(self) -> None:
        self.version = itertools.count(1)
        self.secret: dict[str, Any] | None = None
        self.configurations = {kind: {**_template(kind), "webhooks": [],
                                      "metadata": {"name": "gpuguard", "resourceVersion": "0"}}
                               for kind in (certwatch.MUTATING, certwatch.VALIDATING)}
        text = yaml.safe_dump_all([_template(certwatch.MUTATING), _template(certwatch.VALIDATING)])
        self.configmap = {"metadata": {"name": "gpuguard-webhooks"}, "data": {"webhooks.yaml": text}}
        self.writes: list[str] = []

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(next(self.version))
        return body

    def read_secret(self, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.secret)

    def create_secret(self, ns: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.secret is not None:
            raise Conflict(409)
        self.secret = self._stamp(body)
        self.writes.append("secret")
        return copy.deepcopy(self.secret)

    def replace_secret(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        assert self.secret is not None
        if body["metadata"].get("resourceVersion") != self.secret["metadata"]["resourceVersion"]:
            raise Conflict(409)
        self.secret = self._stamp(body)
        self.writes.append("secret")
        return copy.deepcopy(self.secret)

    def read_configmap(self, ns: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.configmap)

    def read_configuration(self, kind: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.configurations[kind])

    def replace_configuration(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"].get("resourceVersion") != self.configurations[kind]["metadata"]["resourceVersion"]:
            raise Conflict(409)
        self.configurations[kind] = self._stamp(body)
        self.writes.append(kind)
        return copy.deepcopy(self.configurations[kind])

    def trusted(self) -> frozenset[str]:
        return sm.trusted_by_all(self.configurations.values())


def _replica(cluster: FakeCluster, tmp_path: Path, name: str) -> certwatch.SelfManagedCerts:
    opts = certwatch.Options("gpuguard-certs", "gpuguard", HOSTS, LIFE, directory=str(tmp_path / name))
    return certwatch.SelfManagedCerts(cluster, opts)


def _serve(replica: certwatch.SelfManagedCerts) -> None:
    """What ``run`` does after a pass: the TLS context loads the files just written."""
    replica.loaded(replica.written)


def _assert_served_is_trusted(cluster: FakeCluster, replicas: list[certwatch.SelfManagedCerts]) -> None:
    trusted = cluster.trusted()
    bundle = sm.parse(*certwatch._decoded(cluster.secret)).bundle()
    for replica in replicas:
        if replica.problems():  # not ready: the Service sends it nothing
            continue
        served = x509.load_pem_x509_certificate(replica.served)
        assert any(sm.issued_by(served, ca) and sm.fingerprint(ca) in trusted for ca in bundle), \
            "a replica serves a certificate the webhooks do not trust"


def test_a_fresh_install_creates_the_secret_then_writes_the_webhooks_then_is_ready(tmp_path: Path) -> None:
    cluster = FakeCluster()
    replica = _replica(cluster, tmp_path, "a")
    cert_path, key_path = replica.bootstrap()
    assert cluster.writes == ["secret"]  # no webhook before the server listens
    assert Path(cert_path).read_bytes() == replica.written and (Path(key_path).stat().st_mode & 0o777) == 0o600
    assert replica.problems() == ["webhook configurations not written yet"]
    replica.reconcile()
    assert sorted(cluster.writes[1:]) == [certwatch.MUTATING, certwatch.VALIDATING]
    assert all(len(c["webhooks"]) == 2 for c in cluster.configurations.values())
    assert replica.problems() == []
    replica.reconcile()
    assert len(cluster.writes) == 3  # in step: nothing more is written


@pytest.mark.parametrize("shipped", [True, False], ids=["secret shipped empty", "no secret"])
def test_two_replicas_starting_together_agree_on_one_secret(tmp_path: Path, shipped: bool, t0: dt.datetime) -> None:
    cluster = FakeCluster()
    if shipped:  # as the manifests install it: the server only updates it
        cluster.secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                          "metadata": {"name": "gpuguard-certs", "resourceVersion": "0"}}
    a, b = _replica(cluster, tmp_path, "a"), _replica(cluster, tmp_path, "b")
    # Both read the Secret before either writes: b's write loses with 409 (create or stale
    # resourceVersion) and b then reads a's.
    live_a, live_b = a._read(), b._read()
    assert a._step(live_a, t0) and b._step(live_b, t0)
    assert cluster.writes == ["secret"]
    for replica in (a, b):
        replica.reconcile(t0)
        _serve(replica)
    assert a.written == b.written and a.state.bundle() == b.state.bundle()
    assert a.problems() == b.problems() == []


def test_rotation_across_replicas_never_serves_an_untrusted_certificate(tmp_path: Path, t0: dt.datetime) -> None:
    """Three replicas, passes in a shifting order, through two CA lifetimes: renewals, rotations and
    retirements all happen, and after every pass each replica's certificate is trusted."""
    cluster = FakeCluster()
    replicas = [_replica(cluster, tmp_path, n) for n in "abc"]
    for replica in replicas:
        replica.bootstrap()
        _serve(replica)
    now, steps, ready = t0, [], 0
    for tick in range(int(2 * LIFE.ca / dt.timedelta(minutes=2))):
        order = replicas[tick % 3:] + replicas[:tick % 3]
        for replica in order:
            before = len(cluster.writes)
            replica.reconcile(now)
            _serve(replica)
            steps += cluster.writes[before:]
            _assert_served_is_trusted(cluster, replicas)
            ready += not replica.problems()
        now += dt.timedelta(minutes=2)
    assert ready == 3 * (tick + 1)  # and every replica was ready after every one of its passes
    signers = {sm.fingerprint(r.state.signer.cert) for r in replicas if r.state.signer}
    assert len(signers) == 1
    annotations = (cluster.secret or {})["metadata"]["annotations"]
    assert int(annotations[sm.SERIAL]) >= 5  # created, then at least two rotations staged and retired
    assert steps.count("secret") >= 10


def test_an_api_error_is_reported_in_one_line(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.configmap = None  # type: ignore[assignment]
    replica = _replica(cluster, tmp_path, "a")
    with pytest.raises(certwatch.CertSetupError, match="gpuguard-webhooks"):
        replica.bootstrap()
    assert certwatch._describe(Conflict(403), replica.opts).startswith("not allowed (HTTP 403)")


@pytest.mark.parametrize(("args", "message"), [
    (["--tls-cert", "c", "--tls-key", "k"], "replaces --tls-cert/--tls-key/--dev-certs"),
    (["--workers", "2"], "one worker per process"),
    (["--serving-lifetime", "10s", "--cert-check-interval", "2"], "at least 12 times --cert-check-interval"),
    (["--ca-lifetime", "a year"], "not a duration"),
    (["--ca-lifetime", "30m", "--ca-overlap", "10m"], "more than 6 times the overlap"),
])
def test_serve_refuses_self_managed_settings_that_cannot_work(args: list[str], message: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from gpuguard.webhook.server import command

    assert command.main(["--self-managed-certs", "gpuguard-certs", "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
