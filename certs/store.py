"""Certificate files on disk: names, PEM encoding, safe writes and loading.

Two properties matter more than anything else here:

* private keys are *created* with mode 0600 (``os.open`` with the mode), never written first
  and chmod-ed after, so there is no window where another user can read them;
* every file is written to a temp file in the same directory and renamed over the target,
  so a server watching the directory never reads half a certificate.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from gpuguard.certs.issue import PrivateKey

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

KEY_MODE = 0o600
CERT_MODE = 0o644
DIR_MODE = 0o700


class CertError(Exception):
    """A problem the user can fix (missing file, wrong file, expired CA); shown without a traceback."""


@dataclass(frozen=True)
class BundlePaths:
    """Where ``write_bundle`` put things; ``ca_created`` is False when an existing CA was reused."""

    ca_cert: Path
    ca_key: Path
    tls_cert: Path
    tls_key: Path
    ca_created: bool = True


def bundle_paths(out_dir: Path | str, ca_created: bool = True) -> BundlePaths:
    """The fixed file names in a bundle directory (the names `kubectl create secret tls` expects)."""
    d = Path(out_dir)
    return BundlePaths(d / CA_CERT, d / CA_KEY, d / TLS_CERT, d / TLS_KEY, ca_created)


def cert_pem(cert: x509.Certificate) -> bytes:
    """PEM, the only encoding caBundle, Secrets and Python's ssl all accept."""
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    """PKCS#8, unencrypted: what Python's ssl module, Go and ``kubectl create secret tls`` all read."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def ensure_dir(path: Path | str) -> Path:
    """Create the output directory 0700 (it holds keys); leave an existing one's mode alone."""
    d = Path(path)
    if d.exists():
        if not d.is_dir():
            raise CertError(f"{d} exists and is not a directory")
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    d.mkdir(mode=DIR_MODE)
    return d


def atomic_write(path: Path | str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` via a same-directory temp file created with ``mode``, then rename.

    ``os.replace`` is atomic within one filesystem, which is why the temp file must live in
    the target's directory rather than in ``/tmp``.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    # Make the rename itself durable; best effort (not every filesystem allows fsync on a dir).
    with contextlib.suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_key(path: Path | str, key: PrivateKey) -> None:
    """Atomically, created 0600 (never world-readable, not even for an instant)."""
    atomic_write(path, key_pem(key), KEY_MODE)


def write_cert(path: Path | str, cert: x509.Certificate) -> None:
    """Atomically, so a watching server never loads a truncated certificate."""
    atomic_write(path, cert_pem(cert), CERT_MODE)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertError(f"{path}: no such file") from None
    except OSError as exc:
        raise CertError(f"{path}: {exc.strerror or exc}") from None


def load_cert(path: Path | str) -> x509.Certificate:
    """The first certificate in a PEM file, with a readable error for anything else."""
    p = Path(path)
    data = _read(p)
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise CertError(f"{p}: not a PEM certificate") from None


def load_key(path: Path | str) -> PrivateKey:
    """An unencrypted EC or RSA key; anything else is a ``CertError`` the user can act on."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    p = Path(path)
    data = _read(p)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise CertError(f"{p}: not an unencrypted PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertError(f"{p}: unsupported key type (expected EC or RSA)")
    return key


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    """Whether ``key`` is the private half of ``cert`` (a mismatched pair makes TLS fail at handshake)."""
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return cert.public_key().public_bytes(der, spki) == key.public_key().public_bytes(der, spki)


def read_ca_bundle(path: Path | str) -> bytes:
    """The PEM bytes to put in ``caBundle``, after checking they are certificates and nothing else.

    A caBundle is readable by anyone who can read webhook configurations, so a ``ca.key``
    passed by mistake must never be uploaded: refuse any file that holds a private key.
    """
    p = Path(path)
    data = _read(p)
    if b"PRIVATE KEY" in data:
        raise CertError(f"{p} contains a private key; pass the CA certificate (ca.crt), not its key")
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CertError(f"{p}: not a PEM certificate bundle") from None
    now = dt.datetime.now(dt.UTC)
    for cert in certs:
        if cert.not_valid_after_utc <= now:
            raise CertError(f"{p}: certificate {cert.subject.rfc4514_string()} expired "
                            f"{cert.not_valid_after_utc:%Y-%m-%d}")
    return b"".join(cert_pem(c) for c in certs)
