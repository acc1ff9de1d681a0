"""Make the CA and the serving certificate, in memory.

Nothing here touches the filesystem or the cluster, so the same functions serve the CLI, the
end-to-end tests (which need an IP SAN of 127.0.0.1) and anyone embedding gpuguard.  The
certificates follow what the apiserver's Go TLS client checks: names only in SANs (the CN is
ignored), ``serverAuth`` usage on the leaf, ``keyCertSign`` on the CA.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable, Sequence
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ec", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_CA_DAYS = 3650
DEFAULT_SERVING_DAYS = 365
# Backdate notBefore so a node whose clock runs a little behind still accepts a fresh cert.
CLOCK_SKEW = dt.timedelta(minutes=5)


def generate_key(key_type: KeyType = "ec") -> PrivateKey:
    """EC P-256 by default (small, fast handshakes); RSA 2048 for estates that still require it."""
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ValueError(f"unknown key type {key_type!r} (expected 'ec' or 'rsa')")


def key_type_of(key: PrivateKey) -> KeyType:
    """The ``KeyType`` of an existing key, so a renewal keeps the algorithm the admin chose."""
    return "rsa" if isinstance(key, rsa.RSAPrivateKey) else "ec"


def serving_dns_names(service: str, namespace: str) -> list[str]:
    """Every name the apiserver may dial a Service by (it uses ``NAME.NS.svc``; the rest are for humans)."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def create_ca(
    common_name: str = "gpuguard-ca",
    days: int = DEFAULT_CA_DAYS,
    key_type: KeyType = "ec",
    now: dt.datetime | None = None,
    lifetime: dt.timedelta | None = None,
) -> tuple[x509.Certificate, PrivateKey]:
    """A self-signed CA that may sign leaf certificates only (``path_length=0``).

    The CA lives much longer than the serving cert because its PEM sits in the webhook
    configurations' ``caBundle``: renewing the leaf then needs no cluster change.  ``lifetime``
    overrides ``days`` (the server's self-managed mode counts in any unit, tests in seconds).
    """
    if lifetime is None and days < 1:
        raise ValueError("CA validity must be at least 1 day")
    now = now or _now()
    validity = lifetime if lifetime is not None else dt.timedelta(days=days)
    key = generate_key(key_type)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_serving_cert(
    ca_cert: x509.Certificate,
    ca_key: PrivateKey,
    dns_names: Sequence[str],
    ips: Iterable[IPAddress | str] = (),
    days: int = DEFAULT_SERVING_DAYS,
    key_type: KeyType = "ec",
    now: dt.datetime | None = None,
    lifetime: dt.timedelta | None = None,
) -> tuple[x509.Certificate, PrivateKey]:
    """A TLS server certificate for the webhook, signed by ``ca_cert`` (``lifetime`` overrides ``days``).

    The leaf never outlives its CA: a chain whose CA expired first fails verification anyway,
    so capping ``notAfter`` makes the expiry metric (``gpuguard_cert_expiry_timestamp_seconds``) tell the truth.
    """
    if lifetime is None and days < 1:
        raise ValueError("serving certificate validity must be at least 1 day")
    now = now or _now()
    ip_list = [ipaddress.ip_address(ip) if isinstance(ip, str) else ip for ip in ips]
    if not dns_names and not ip_list:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = generate_key(key_type)
    validity = lifetime if lifetime is not None else dt.timedelta(days=days)
    not_after = min(now + validity, ca_cert.not_valid_after_utc)
    if not_after <= now:
        raise ValueError("the CA has expired; create a new CA (and re-inject caBundle)")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ip_list]
    # The CN is informational only (Go ignores it); use the name the apiserver actually dials.
    names = [*dns_names, *(str(ip) for ip in ip_list)]
    common_name = next((n for n in names if n.endswith(".svc")), names[0])[:64]
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False,
                key_encipherment=isinstance(key, rsa.RSAPrivateKey),
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def sans_of(cert: x509.Certificate) -> tuple[list[str], list[IPAddress]]:
    """DNS and IP SANs of an existing leaf, so a renewal reissues exactly the same names."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return san.get_values_for_type(x509.DNSName), san.get_values_for_type(x509.IPAddress)


def is_ca(cert: x509.Certificate) -> bool:
    """True when the certificate may sign others (BasicConstraints CA:TRUE)."""
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False
