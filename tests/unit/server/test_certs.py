"""A serving certificate is used only if it is valid now, matches its key and, with ``--tls-ca``,
chains to that CA and names the service; else the old pair stays, the failure is logged and
counted, and ``/readyz`` reports it once the certificate in use nears expiry."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gpuguard.certs.issue import create_ca, issue_serving_cert
from gpuguard.webhook.server import tls
from tests.support.server import Server, issue_certs, metric_value, run_cli, served_serial
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)  # a bound for a hung server, far above a busy machine's slowest run


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def leaf(ca: tuple, names: list[str], not_before: dt.datetime, not_after: dt.datetime) -> tuple[bytes, bytes]:
    """A serving certificate with exactly the validity asked for (certs/ refuses odd ones on purpose)."""
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    sans = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return _pem(cert), _key_pem(key)


@pytest.fixture
def now() -> dt.datetime:
    """The clock read when the test runs, never at import: a validity window relative to a time taken at
    collection can have passed by the time a busy machine reaches the test (issue 37)."""
    return dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def ca():  # create_ca's default lifetime is ten years: it outlives any test run
    return create_ca()


@pytest.fixture(scope="module")
def other_ca():
    return create_ca("someone-else")


def _material(cert_pem: bytes, key_pem: bytes) -> tls.TlsMaterial:
    return tls.TlsMaterial(cert_pem, key_pem)


def test_a_good_certificate_passes(ca):
    cert, key = issue_serving_cert(ca[0], ca[1], ["gpuguard.gpuguard.svc"], ["127.0.0.1"])
    trust = tls.TrustPolicy(_pem(ca[0]), ("gpuguard.gpuguard.svc", "127.0.0.1"))
    tls.check_pair(_material(_pem(cert), _key_pem(key)), trust)


@pytest.mark.parametrize(("case", "expected"), [
    ("expired", "certificate expired at"),
    ("not-yet-valid", "certificate is not valid before"),
    ("wrong-ca", "is not trusted for gpuguard.gpuguard.svc by the configured CA"),
    ("wrong-name", "is not trusted for gpuguard.gpuguard.svc by the configured CA"),
    ("wrong-key", "the certificate does not match the key"),
])
def test_a_bad_certificate_is_refused_with_the_reason(ca, other_ca, case, expected, now):
    day = dt.timedelta(days=1)
    name = ["gpuguard.gpuguard.svc"]
    cert, key = {
        "expired": lambda: leaf(ca, name, now - 3 * day, now - day),
        "not-yet-valid": lambda: leaf(ca, name, now + day, now + 3 * day),
        "wrong-ca": lambda: leaf(other_ca, name, now - day, now + day),
        "wrong-name": lambda: leaf(ca, ["evil.example.com"], now - day, now + day),
        "wrong-key": lambda: (leaf(ca, name, now - day, now + day)[0], leaf(ca, name, now - day, now + day)[1]),
    }[case]()
    with pytest.raises(ValueError, match=expected):
        tls.check_pair(_material(cert, key), tls.TrustPolicy(_pem(ca[0]), tuple(name)))


def test_without_a_ca_the_names_are_still_checked(ca, now):
    cert, key = leaf(ca, ["other.svc"], now - dt.timedelta(days=1), now + dt.timedelta(days=1))
    with pytest.raises(ValueError, match="does not name gpuguard.gpuguard.svc"):
        tls.check_pair(_material(cert, key), tls.TrustPolicy(None, ("gpuguard.gpuguard.svc",)))


def _write(paths: tuple[Path, Path], pair: tuple[bytes, bytes]) -> None:
    for path, data in zip(paths, pair, strict=True):
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def test_tls_state_reports_a_refused_renewal_only_near_expiry(tmp_path: Path, ca, now):
    paths = (tmp_path / "tls.crt", tmp_path / "tls.key")
    # 60 h lifetime: "near expiry" is the last min(1 day, a third of it) = 20 h.
    _write(paths, leaf(ca, ["127.0.0.1"], now - dt.timedelta(hours=20), now + dt.timedelta(hours=40)))
    state = tls.TlsState(str(paths[0]), str(paths[1]), tls.TrustPolicy(_pem(ca[0])))
    assert state.trust.names == ("127.0.0.1",)  # defaults to the names of the certificate in use
    assert state.problems() == []
    state.last_error = "certificate expired at 2020-01-01"
    assert state.problems(now) == [], "40 h left is not near expiry"
    (reason,) = state.problems(now + dt.timedelta(hours=25))
    assert "expires at" in reason and "was refused: certificate expired at 2020-01-01" in reason
    assert state.problems(now + dt.timedelta(hours=41)) == [
        f"serving certificate expired at {state.not_after.isoformat()}"]


def test_live_server_keeps_its_pair_when_the_replacement_is_bad(tmp_path: Path, ca, other_ca, now):
    certs = tmp_path / "certs"
    ca_path, cert_path, key_path = issue_certs(certs)
    ca_pair = (x509.load_pem_x509_certificate(ca_path.read_bytes()),
               serialization.load_pem_private_key((certs / "ca.key").read_bytes(), None))
    short = leaf(ca_pair, ["127.0.0.1"], now - dt.timedelta(minutes=50), now + dt.timedelta(minutes=10))
    _write((cert_path, key_path), short)
    server = Server(tmp_path, ca_path, cert_path, key_path,
                    ["--reload-interval", "0.2", "--tls-ca", str(ca_path), "--tls-server-name", "127.0.0.1"])
    try:
        server.wait_ready()
        serving = served_serial(server.port, ca_path)
        for bad in (leaf(ca_pair, ["127.0.0.1"], now - dt.timedelta(days=3), now - dt.timedelta(days=1)),
                    leaf(other_ca, ["127.0.0.1"], now - dt.timedelta(days=1), now + dt.timedelta(days=9)),
                    leaf(ca_pair, ["10.9.9.9"], now - dt.timedelta(days=1), now + dt.timedelta(days=9))):
            errors = metric_value(server.client.get("/metrics").text, "gpuguard_cert_reloads_total",
                                  {"result": "error"})
            _write((cert_path, key_path), bad)
            wait_for(lambda e=errors: metric_value(server.client.get("/metrics").text,
                                                   "gpuguard_cert_reloads_total", {"result": "error"}) > e,
                     what="the refused reload to be counted")
            assert served_serial(server.port, ca_path) == serving
        ready = server.client.get("/readyz")
        assert ready.status_code == 503
        assert "was refused" in ready.json()["reasons"][0]
        assert server.logs().count("serving certificate not reloaded") == 3
        good = leaf(ca_pair, ["127.0.0.1"], now - dt.timedelta(minutes=1), now + dt.timedelta(days=9))
        _write((cert_path, key_path), good)
        wait_for(lambda: served_serial(server.port, ca_path) != serving, what="the good certificate")
        assert server.client.get("/readyz").status_code == 200
    finally:
        server.stop()


def test_serve_refuses_an_expired_or_untrusted_certificate_at_start(tmp_path: Path, ca, other_ca, now):
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(_pem(ca[0]))
    for case, pair in {"expired": leaf(ca, ["127.0.0.1"], now - dt.timedelta(days=3), now - dt.timedelta(days=1)),
                       "untrusted": leaf(other_ca, ["127.0.0.1"], now - dt.timedelta(days=1),
                                         now + dt.timedelta(days=1))}.items():
        paths = (tmp_path / f"{case}.crt", tmp_path / f"{case}.key")
        _write(paths, pair)
        result = run_cli("serve", "--tls-cert", str(paths[0]), "--tls-key", str(paths[1]), "--tls-ca", str(ca_file))
        assert result.returncode == 2
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("gpuguard: error: TLS certificate"), result.stderr
        assert ("expired at" if case == "expired" else "not trusted for 127.0.0.1") in lines[0]
