"""certs/: issuing, file safety, renewal, expiry, caBundle injection and the ``gpuguard certs`` CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import os
import ssl
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.verification import DNSName, IPAddress, PolicyBuilder, Store

from gpuguard import certs
from gpuguard.certs import cli as certs_cli
from gpuguard.certs.inject import MUTATING, VALIDATING
from gpuguard.certs.issue import sans_of
from gpuguard.certs.store import load_cert, load_key

SERVICE, NAMESPACE = "gpuguard", "gpuguard"
EXPECTED_DNS = ["gpuguard", "gpuguard.gpuguard", "gpuguard.gpuguard.svc",
                "gpuguard.gpuguard.svc.cluster.local"]


# ---------------------------------------------------------------- helpers


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _verify(ca_path: Path, leaf_path: Path, name: str) -> None:
    """Chain check with cryptography's RFC 5280 verifier (what a Go client would also demand)."""
    store = Store([load_cert(ca_path)])
    try:
        subject: DNSName | IPAddress = IPAddress(ipaddress.ip_address(name))
    except ValueError:
        subject = DNSName(name)
    PolicyBuilder().store(store).build_server_verifier(subject).verify(load_cert(leaf_path), [])


def _tls_handshake(ca_path: Path, cert_path: Path, key_path: Path, server_name: str) -> None:
    """A real OpenSSL handshake in memory: proves the pair matches and hostname/IP checks pass."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_path, key_path)
    client_ctx = ssl.create_default_context(cafile=str(ca_path))
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname=server_name)
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, obj in (("client", client), ("server", server)):
            if done[side]:
                continue
            try:
                obj.do_handshake()
                done[side] = True
            except ssl.SSLWantReadError:
                pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("TLS handshake did not complete")


def _no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuguard")
    certs_cli.register(parser.add_subparsers(dest="command"))
    return parser


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def bundle(tmp_path: Path) -> certs.BundlePaths:
    return certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE, ["127.0.0.1"], 365)


# ---------------------------------------------------------------- create


def test_bundle_has_service_sans_and_ip_sans(bundle: certs.BundlePaths) -> None:
    dns, ips = sans_of(load_cert(bundle.tls_cert))
    assert dns == EXPECTED_DNS
    assert ips == [ipaddress.ip_address("127.0.0.1")]


def test_serving_cert_is_a_tls_server_leaf(bundle: certs.BundlePaths) -> None:
    leaf = load_cert(bundle.tls_cert)
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in eku
    assert isinstance(load_key(bundle.tls_key), ec.EllipticCurvePrivateKey)
    assert load_key(bundle.tls_key).curve.name == "secp256r1"


def test_keys_are_0600_and_new_dir_is_0700(bundle: certs.BundlePaths) -> None:
    assert _mode(bundle.ca_key) == 0o600
    assert _mode(bundle.tls_key) == 0o600
    assert _mode(bundle.tls_key.parent) == 0o700
    assert _no_temp_files(bundle.tls_key.parent)


def test_keys_are_created_with_their_mode_not_chmodded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("keys must be created 0600, not chmod-ed afterwards")

    monkeypatch.setattr(os, "chmod", refuse)
    monkeypatch.setattr(os, "fchmod", refuse)
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)
    assert _mode(paths.tls_key) == 0o600


def test_existing_output_dir_mode_is_left_alone(tmp_path: Path) -> None:
    out = tmp_path / "pki"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)  # mkdir's mode is filtered by the umask
    certs.write_bundle(out, SERVICE, NAMESPACE)
    assert _mode(out) == 0o755


def test_chain_verifies_by_dns_and_ip(bundle: certs.BundlePaths) -> None:
    _verify(bundle.ca_cert, bundle.tls_cert, "gpuguard.gpuguard.svc")
    _verify(bundle.ca_cert, bundle.tls_cert, "127.0.0.1")
    _tls_handshake(bundle.ca_cert, bundle.tls_cert, bundle.tls_key, "gpuguard.gpuguard.svc")
    _tls_handshake(bundle.ca_cert, bundle.tls_cert, bundle.tls_key, "127.0.0.1")


def test_chain_rejects_names_not_in_the_cert(bundle: certs.BundlePaths) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the verifier's error type is an implementation detail
        _verify(bundle.ca_cert, bundle.tls_cert, "other.gpuguard.svc")


def test_rerun_reuses_the_ca_and_replaces_the_leaf(tmp_path: Path) -> None:
    first = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)
    ca_before, leaf_before = first.ca_cert.read_bytes(), first.tls_cert.read_bytes()
    second = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)
    assert first.ca_created and not second.ca_created
    assert second.ca_cert.read_bytes() == ca_before
    assert second.tls_cert.read_bytes() != leaf_before
    _verify(second.ca_cert, second.tls_cert, "gpuguard.gpuguard.svc")


def test_half_a_ca_is_an_error_not_a_silent_new_ca(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)
    paths.ca_key.unlink()
    with pytest.raises(certs.CertError, match="ca.key"):
        certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)


def test_leaf_never_outlives_its_ca(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE, days=365, ca_days=5)
    assert _not_after(paths.tls_cert) == _not_after(paths.ca_cert)


def test_rsa_keys_on_request(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE, key_type="rsa")
    key = load_key(paths.tls_key)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 2048
    _tls_handshake(paths.ca_cert, paths.tls_cert, paths.tls_key, "gpuguard.gpuguard.svc")


def test_python_api_issue_in_memory() -> None:
    ca_cert, ca_key = certs.create_ca(days=30)
    names = certs.serving_dns_names("hook", "ns")
    leaf, _key = certs.issue_serving_cert(ca_cert, ca_key, names, ["::1"], days=7)
    dns, ips = sans_of(leaf)
    assert dns == ["hook", "hook.ns", "hook.ns.svc", "hook.ns.svc.cluster.local"]
    assert ips == [ipaddress.ip_address("::1")]
    assert leaf.issuer == ca_cert.subject


# ---------------------------------------------------------------- expiry (what the metric and renewal read)


def _not_after(path: Path) -> dt.datetime:
    return load_cert(path).not_valid_after_utc


def test_cert_expiry_is_aware_utc_and_matches_days(bundle: certs.BundlePaths) -> None:
    expiry = _not_after(bundle.tls_cert)
    assert expiry.tzinfo is not None and expiry.utcoffset() == dt.timedelta(0)
    expected = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    assert abs(expiry - expected) < dt.timedelta(minutes=5)


def test_cert_expiry_of_missing_or_bad_file(tmp_path: Path) -> None:
    with pytest.raises(certs.CertError, match="no such file"):
        _not_after(tmp_path / "nope.crt")
    (tmp_path / "junk.crt").write_text("not a cert")
    with pytest.raises(certs.CertError, match="not a PEM certificate"):
        _not_after(tmp_path / "junk.crt")


# ---------------------------------------------------------------- renew


def test_renew_keeps_ca_and_replaces_leaf_when_due(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE, ["127.0.0.1"], days=10)
    ca_before = paths.ca_cert.read_bytes()
    old_leaf = load_cert(paths.tls_cert)
    old_key = paths.tls_key.read_bytes()

    result = certs.renew_serving_cert(paths.tls_cert.parent, days=90, before_days=30)

    assert result.renewed and "within 30" in result.reason
    assert paths.ca_cert.read_bytes() == ca_before
    new_leaf = load_cert(paths.tls_cert)
    assert new_leaf.serial_number != old_leaf.serial_number
    assert paths.tls_key.read_bytes() != old_key
    assert sans_of(new_leaf) == sans_of(old_leaf)
    assert _not_after(paths.tls_cert) - dt.datetime.now(dt.UTC) > dt.timedelta(days=89)
    assert _mode(paths.tls_key) == 0o600
    assert _no_temp_files(paths.tls_cert.parent)
    _tls_handshake(paths.ca_cert, paths.tls_cert, paths.tls_key, "127.0.0.1")


def test_renew_leaves_a_fresh_cert_alone_unless_forced(bundle: certs.BundlePaths) -> None:
    before = bundle.tls_cert.read_bytes()
    kept = certs.renew_serving_cert(bundle.tls_cert.parent)
    assert not kept.renewed
    assert bundle.tls_cert.read_bytes() == before
    forced = certs.renew_serving_cert(bundle.tls_cert.parent, force=True)
    assert forced.renewed and forced.reason == "forced"
    assert bundle.tls_cert.read_bytes() != before


def test_renew_keeps_the_key_algorithm(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE, key_type="rsa")
    certs.renew_serving_cert(paths.tls_cert.parent, force=True)
    assert isinstance(load_key(paths.tls_key), rsa.RSAPrivateKey)


def test_renew_reissues_a_leaf_from_another_ca(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "pki", SERVICE, NAMESPACE)
    paths.ca_cert.unlink()
    paths.ca_key.unlink()
    certs.write_bundle(tmp_path / "other", SERVICE, NAMESPACE)
    for name in ("ca.crt", "ca.key"):
        (paths.ca_cert.parent / name).write_bytes((tmp_path / "other" / name).read_bytes())
    result = certs.renew_serving_cert(paths.tls_cert.parent)
    assert result.renewed and "not issued by" in result.reason
    _verify(paths.ca_cert, paths.tls_cert, "gpuguard.gpuguard.svc")


def test_renew_without_a_ca_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(certs.CertError, match="certs create"):
        certs.renew_serving_cert(tmp_path)


# ---------------------------------------------------------------- caBundle / inject


def _configuration(kind: str, bundles: list[str | None]) -> dict[str, Any]:
    hooks = []
    for i, bundle in enumerate(bundles):
        client_config: dict[str, Any] = {"service": {"namespace": "gpuguard", "name": "gpuguard"}}
        if bundle is not None:
            client_config["caBundle"] = bundle
        hooks.append({"name": f"hook{i}.gpuguard.io", "clientConfig": client_config})
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": "gpuguard"},
            "webhooks": hooks}


def test_patch_sets_ca_bundle_on_every_webhook_and_tests_names() -> None:
    config = _configuration(MUTATING, [None, "c3RhbGU="])
    ops = certs.build_ca_bundle_patch(config, "TkVX")
    assert {"op": "test", "path": "/webhooks/0/name", "value": "hook0.gpuguard.io"} in ops
    assert {"op": "test", "path": "/webhooks/1/name", "value": "hook1.gpuguard.io"} in ops
    patched = jsonpatch.apply_patch(config, ops)
    assert [h["clientConfig"]["caBundle"] for h in patched["webhooks"]] == ["TkVX", "TkVX"]
    assert patched["webhooks"][0]["clientConfig"]["service"] == {"namespace": "gpuguard", "name": "gpuguard"}


def test_patch_is_empty_when_bundle_is_current() -> None:
    assert certs.build_ca_bundle_patch(_configuration(VALIDATING, ["TkVX"]), "TkVX") == []


def test_patch_fails_if_webhooks_moved() -> None:
    config = _configuration(MUTATING, [None, None])
    ops = certs.build_ca_bundle_patch(config, "TkVX")
    config["webhooks"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(config, ops)


def test_patch_refuses_a_configuration_without_webhooks() -> None:
    with pytest.raises(certs.InjectError, match="no webhooks"):
        certs.build_ca_bundle_patch(_configuration(MUTATING, []), "TkVX")


def test_ca_bundle_is_base64_of_the_pem(bundle: certs.BundlePaths) -> None:
    import base64

    pem = certs.read_ca_bundle(bundle.ca_cert)
    assert base64.b64decode(certs.encode_ca_bundle(pem)) == pem
    assert pem.startswith(b"-----BEGIN CERTIFICATE-----")


def test_ca_bundle_never_carries_a_private_key(bundle: certs.BundlePaths, tmp_path: Path) -> None:
    with pytest.raises(certs.CertError, match="private key"):
        certs.read_ca_bundle(bundle.ca_key)
    combined = tmp_path / "combined.pem"
    combined.write_bytes(bundle.ca_cert.read_bytes() + bundle.ca_key.read_bytes())
    with pytest.raises(certs.CertError, match="private key"):
        certs.read_ca_bundle(combined)


class FakeApiserver:
    """Just enough of the admissionregistration API to drive the real kubernetes client."""

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects  # plural -> object
        self.requests: list[tuple[str, str, str, Any]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _lookup(self) -> tuple[str, dict[str, Any] | None]:
                parts = self.path.split("?")[0].strip("/").split("/")
                plural, name = parts[-2], parts[-1]
                obj = fake.objects.get(plural)
                return plural, obj if obj and obj["metadata"]["name"] == name else None

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                plural, obj = self._lookup()
                fake.requests.append(("GET", plural, "", None))
                if obj is None:
                    self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                     "reason": "NotFound", "code": 404})
                else:
                    self._send(200, obj)

            def do_PATCH(self) -> None:  # noqa: N802
                plural, obj = self._lookup()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(("PATCH", plural, self.headers["Content-Type"], body))
                assert obj is not None
                fake.objects[plural] = jsonpatch.apply_patch(obj, body)
                self._send(200, fake.objects[plural])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "admin", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "admin"}}],
        }))
        return path


@pytest.fixture
def apiserver() -> Iterator[FakeApiserver]:
    fake = FakeApiserver({
        "mutatingwebhookconfigurations": _configuration(MUTATING, [None]),
        "validatingwebhookconfigurations": _configuration(VALIDATING, [None]),
    })
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_inject_patches_both_configurations_with_json_patch(
    apiserver: FakeApiserver, bundle: certs.BundlePaths, tmp_path: Path
) -> None:
    pem = certs.read_ca_bundle(bundle.ca_cert)
    results = certs.inject_ca_bundle(pem, kubeconfig=str(apiserver.kubeconfig(tmp_path)))
    assert [(r.kind, r.changed, r.webhooks) for r in results] == [(MUTATING, True, 1), (VALIDATING, True, 1)]
    patches = [r for r in apiserver.requests if r[0] == "PATCH"]
    assert {r[2] for r in patches} == {"application/json-patch+json"}
    for obj in apiserver.objects.values():
        assert obj["webhooks"][0]["clientConfig"]["caBundle"] == certs.encode_ca_bundle(pem)
    # Second run: nothing to change, nothing patched.
    again = certs.inject_ca_bundle(pem, kubeconfig=str(apiserver.kubeconfig(tmp_path)))
    assert not any(r.changed for r in again)
    assert len([r for r in apiserver.requests if r[0] == "PATCH"]) == 2


def test_inject_touches_nothing_when_one_configuration_is_missing(
    apiserver: FakeApiserver, bundle: certs.BundlePaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    del apiserver.objects["validatingwebhookconfigurations"]
    kubeconfig = str(apiserver.kubeconfig(tmp_path))
    code = _run(["certs", "inject", "--ca", str(bundle.ca_cert), "--kubeconfig", kubeconfig])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("gpuguard: error: ValidatingWebhookConfiguration 'gpuguard' not found")
    assert "Traceback" not in err
    assert not [r for r in apiserver.requests if r[0] == "PATCH"]


def test_inject_cli_success_output(
    apiserver: FakeApiserver, bundle: certs.BundlePaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = str(apiserver.kubeconfig(tmp_path))
    code = _run(["certs", "inject", "--ca", str(bundle.ca_cert), "--kubeconfig", kubeconfig])
    out = capsys.readouterr().out
    assert code == 0
    assert "mutatingwebhookconfiguration/gpuguard: patched" in out
    assert "validatingwebhookconfiguration/gpuguard: patched" in out


# ---------------------------------------------------------------- CLI


def test_cli_create_then_renew(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pki"
    assert _run(["certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", str(out),
                 "--ip", "127.0.0.1", "--ip", "::1", "--days", "20", "--ca-days", "100"]) == 0
    text = capsys.readouterr().out
    assert "created" in text and "127.0.0.1" in text and "certs inject" in text
    _verify(out / "ca.crt", out / "tls.crt", "::1")
    assert _run(["certs", "renew", "--dir", str(out)]) == 0
    assert "renewed" in capsys.readouterr().out
    assert _run(["certs", "renew", "--dir", str(out), "--before", "1"]) == 0
    assert "kept" in capsys.readouterr().out
    assert _run(["certs", "create", "--service", "gpuguard", "--namespace", "gpuguard",
                 "--out", str(out)]) == 0
    assert "reused" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", "x", "--ip", "not-ip"],
    ["certs", "create", "--service", "GPUguard", "--namespace", "gpuguard", "--out", "x"],
    ["certs", "create", "--service", "gpuguard", "--namespace", "gpu_guard", "--out", "x"],
    ["certs", "create", "--service", "gpuguard", "--namespace", "gpuguard", "--out", "x", "--days", "0"],
    ["certs", "create", "--service", "gpuguard", "--namespace", "gpuguard"],
    ["certs", "renew", "--dir", "x", "--before", "-1"],
    ["certs", "inject"],
])
def test_cli_usage_errors_exit_2_without_traceback(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


def test_cli_renew_in_empty_dir_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["certs", "renew", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuguard: error: no CA in") and "Traceback" not in err


def test_cli_create_into_a_file_path_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert _run(["certs", "create", "--service", "s", "--namespace", "n", "--out", str(blocker)]) == 2
    assert capsys.readouterr().err.startswith("gpuguard: error:")


def test_cli_inject_refuses_a_key_file(bundle: certs.BundlePaths, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["certs", "inject", "--ca", str(bundle.ca_key)]) == 2
    assert "private key" in capsys.readouterr().err


def test_cli_inject_unreachable_api_exits_2(
    bundle: certs.BundlePaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeApiserver({})
    kubeconfig = fake.kubeconfig(tmp_path)
    fake.server.server_close()  # the port is now closed: connection refused
    assert _run(["certs", "inject", "--ca", str(bundle.ca_cert), "--kubeconfig", str(kubeconfig)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuguard: error: cannot reach the Kubernetes API") and "Traceback" not in err


def test_cli_inject_bad_kubeconfig_exits_2(
    bundle: certs.BundlePaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["certs", "inject", "--ca", str(bundle.ca_cert), "--kubeconfig", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuguard: error:") and "Traceback" not in err


def test_certs_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["certs"]) == 2
    assert "create" in capsys.readouterr().out


def test_registered_in_the_gpuguard_entry_point() -> None:
    from gpuguard.webhook import main

    assert main.VERBS["certs"].module == "gpuguard.certs.cli"
