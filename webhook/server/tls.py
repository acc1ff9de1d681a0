"""The serving certificate: its TLS context, its checks, and its reload without a restart.

Why the TLS context is reloaded *in place*: uvicorn's listening socket keeps a reference to
the ``ssl.SSLContext`` it was started with.  OpenSSL copies the certificate into each new
connection when the connection is set up, so ``load_cert_chain`` on that same context object
changes the certificate of every later handshake while connections already open keep theirs.
The new pair is first loaded into a scratch context (a cert written before its key must not
break the live one), then into the live context on the event loop thread — the thread that
creates connections — so no handshake can start between the certificate and the key load.

Why a new pair is checked before it is loaded: a certificate that has expired, is not yet
valid, does not match its key, was signed by another CA or names another host would be
served to the apiserver, which then fails every call — with ``failurePolicy: Fail`` that
stops admission.  Such a pair is refused: the old one stays in use, the failure is logged and
counted, and ``/readyz`` reports it once the certificate in use is close to its expiry.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.x509 import verification

from gpuguard.webhook.server import logs, metrics


@dataclass(frozen=True)
class TlsMaterial:
    """A certificate chain and key read together from disk, so both come from one moment."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def read(cls, cert_path: str, key_path: str) -> TlsMaterial:
        with open(cert_path, "rb") as cert, open(key_path, "rb") as key:
            return cls(cert.read(), key.read())

    def not_after(self) -> datetime:
        return self.leaf().not_valid_after_utc

    def leaf(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def chain(self) -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates(self.cert_pem)


@contextlib.contextmanager
def _memory_file(data: bytes) -> Iterator[str]:
    """A path OpenSSL can open that holds ``data``; in memory where the kernel allows it.

    ``ssl`` loads certificates only from paths; a memfd keeps the private key off disk and
    works on a read-only root filesystem.  The fallback is a 0600 file in a private temp dir.
    """
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("gpuguard-tls", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="gpuguard-tls-") as tmp:
        path = os.path.join(tmp, "pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield path


def load_material(ctx: ssl.SSLContext, material: TlsMaterial) -> None:
    """``load_cert_chain`` from bytes; raises ``ssl.SSLError`` when the pair does not match."""
    with _memory_file(material.cert_pem) as cert_path, _memory_file(material.key_pem) as key_path:
        ctx.load_cert_chain(cert_path, key_path)


# TLS 1.2 suites: forward secrecy (ECDHE) and authenticated encryption (AES-GCM, ChaCha20) only,
# as the Kubernetes apiserver's own defaults; no CBC, no RSA key exchange.  TLS 1.3 suites are
# all AEAD and not affected by this string.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
# /readyz fails when the certificate in use has less than this share of its lifetime left
# (capped at a day) and its replacement was refused.
EXPIRY_WARNING_FRACTION = 1 / 3
EXPIRY_WARNING_CAP = timedelta(days=1)


def new_server_context() -> ssl.SSLContext:
    """A server context: TLS 1.2+ (the apiserver speaks 1.2 and 1.3), ECDHE + AEAD suites only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


@dataclass(frozen=True)
class TrustPolicy:
    """What a serving certificate must satisfy besides matching its key and being valid now.

    ``ca_pem``: the CA bundle the apiserver trusts (the webhook's ``caBundle``); ``names``: the
    hosts the apiserver dials (``gpuguard.gpuguard.svc``, or the IP of a ``url`` webhook).
    """

    ca_pem: bytes | None = None
    names: tuple[str, ...] = ()

    @classmethod
    def from_files(cls, ca_path: str | None, names: tuple[str, ...]) -> TrustPolicy:
        if ca_path is None:
            return cls(None, names)
        with open(ca_path, "rb") as fh:
            return cls(fh.read(), names)


def _subject(name: str) -> verification.Subject:
    import ipaddress

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def served_names(material: TlsMaterial) -> tuple[str, ...]:
    """The DNS names and IPs the certificate names (its subjectAltName)."""
    try:
        san = material.leaf().extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(san.get_values_for_type(x509.DNSName)) + tuple(
        str(ip) for ip in san.get_values_for_type(x509.IPAddress))


def check_pair(material: TlsMaterial, trust: TrustPolicy | None = None, now: datetime | None = None) -> None:
    """Raise ``ssl.SSLError``/``ValueError`` unless the material is a pair gpuguard may serve.

    The certificate must match its key and be valid now; with a CA in ``trust`` it must chain
    to that CA (through any intermediates in the file) and name every host in ``trust.names``.
    """
    try:
        load_material(new_server_context(), material)
    except ssl.SSLError as exc:
        if "KEY_VALUES_MISMATCH" in str(exc):
            raise ValueError("the certificate does not match the key") from None
        raise
    now = now or datetime.now(UTC)
    leaf = material.leaf()
    if now < leaf.not_valid_before_utc:
        raise ValueError(f"certificate is not valid before {leaf.not_valid_before_utc.isoformat()}")
    if now > leaf.not_valid_after_utc:
        raise ValueError(f"certificate expired at {leaf.not_valid_after_utc.isoformat()}")
    if trust is None:
        return
    names = list(trust.names)
    if trust.ca_pem is not None:
        try:
            store = verification.Store(x509.load_pem_x509_certificates(trust.ca_pem))
        except ValueError as exc:
            raise ValueError(f"the CA file holds no usable certificate: {exc}") from None
        builder = verification.PolicyBuilder().store(store).time(now)
        chain = material.chain()
        targets = names or list(served_names(material)[:1])
        if not targets:
            raise ValueError("certificate has no subjectAltName naming a host")
        for name in targets:
            try:
                builder.build_server_verifier(_subject(name)).verify(chain[0], chain[1:])
            except verification.VerificationError as exc:
                raise ValueError(f"certificate is not trusted for {name} by the configured CA: {exc}") from None
    else:
        missing = [n for n in names if n not in served_names(material)]
        if missing:
            raise ValueError(f"certificate does not name {', '.join(missing)}")


class TlsState:
    """The live server context of this process, the files it came from and the checks a
    replacement must pass (the startup certificate's names unless names were configured)."""

    def __init__(self, cert_path: str, key_path: str, trust: TrustPolicy | None = None) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self.context = new_server_context()
        material = TlsMaterial.read(cert_path, key_path)
        load_material(self.context, material)
        trust = trust or TrustPolicy()
        self.trust = trust if trust.names else TrustPolicy(trust.ca_pem, served_names(material))
        self.last_error: str | None = None
        self._serving(material)

    def _serving(self, material: TlsMaterial) -> None:
        leaf = material.leaf()
        self.cert_pem = material.cert_pem  # what is served now (self-managed mode compares it with its Secret)
        self.not_before, self.not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
        metrics.CERT_EXPIRY.set(self.not_after.timestamp())

    def problems(self, now: datetime | None = None) -> list[str]:
        """Why /readyz should fail: the certificate expired, or expires soon and its renewal failed."""
        now = now or datetime.now(UTC)
        if now >= self.not_after:
            return [f"serving certificate expired at {self.not_after.isoformat()}"]
        margin = min(EXPIRY_WARNING_CAP, (self.not_after - self.not_before) * EXPIRY_WARNING_FRACTION)
        if self.last_error and self.not_after - now <= margin:
            return [f"serving certificate expires at {self.not_after.isoformat()} and its replacement in "
                    f"{self.cert_path} was refused: {self.last_error}"]
        return []

    async def reload(self) -> None:
        """Check the new pair off the loop, then swap it into the live context on the loop."""
        log = logs.server_logger()
        try:
            material = await asyncio.to_thread(TlsMaterial.read, self.cert_path, self.key_path)
            await asyncio.to_thread(check_pair, material, self.trust)
        except (OSError, ssl.SSLError, ValueError) as exc:
            metrics.CERT_RELOADS.labels(result="error").inc()
            self.last_error = str(exc) or type(exc).__name__
            log.error("serving certificate not reloaded; the old one stays in use",
                      extra={"cert": self.cert_path, "key": self.key_path, "error": self.last_error})
            return
        load_material(self.context, material)
        self._serving(material)
        self.last_error = None
        metrics.CERT_RELOADS.labels(result="success").inc()
        log.info("serving certificate reloaded",
                 extra={"cert": self.cert_path, "not_after": self.not_after.isoformat()})


# uvicorn builds the SSL context inside each worker process (``Config.load``), before the app's
# lifespan starts; the app finds that worker's TlsState here to watch and reload it.
_PROCESS_TLS: TlsState | None = None


def process_tls() -> TlsState | None:
    return _PROCESS_TLS


class TlsContextFactory:
    """uvicorn ``ssl_context_factory``: build the context gpuguard keeps and reloads.

    A plain class with string fields so it pickles into spawned ``--workers`` processes.
    """

    def __init__(self, cert_path: str, key_path: str, ca_path: str | None = None,
                 names: tuple[str, ...] = ()) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self.ca_path = ca_path
        self.names = tuple(names)

    def __call__(self, config: object, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        global _PROCESS_TLS
        _PROCESS_TLS = TlsState(self.cert_path, self.key_path, TrustPolicy.from_files(self.ca_path, self.names))
        return _PROCESS_TLS.context
