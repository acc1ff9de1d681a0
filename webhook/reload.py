"""Hot reload of the config file and the serving certificate, without a restart.

Why polling: ConfigMap and Secret volumes are updated by swapping a ``..data`` symlink to a
new timestamped directory, which inotify on the visible path never reports; polling
``os.stat`` (which follows the symlink to the resolved target) every couple of seconds sees
every kind of update — swap, rewrite, ``mv`` over — at negligible cost.  A file's identity is
its resolved path, device, inode, size and mtime, so a same-size rewrite within one mtime tick
is still caught by the inode change of an atomic replace.

Why the TLS context is reloaded *in place*: uvicorn's listening socket keeps a reference to
the ``ssl.SSLContext`` it was started with.  OpenSSL copies the certificate into each new
connection when the connection is set up, so ``load_cert_chain`` on that same context object
changes the certificate of every later handshake while connections already open keep theirs.
The new pair is first loaded into a scratch context (a cert written before its key must not
break the live one), then into the live context on the event loop thread — the thread that
creates connections — so no handshake can start between the certificate and the key load.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from webhook import logs, metrics

DEFAULT_INTERVAL = 2.0


@dataclass(frozen=True)
class FileStamp:
    """What identifies one version of a file on disk."""

    realpath: str
    dev: int
    ino: int
    size: int
    mtime_ns: int


def stamp(path: str) -> FileStamp | None:
    """The stamp of what ``path`` resolves to now, or ``None`` while it is missing (mid-swap)."""
    try:
        st = os.stat(path)
        return FileStamp(os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


OnChange = Callable[[], Awaitable[None]]


@dataclass
class _Watch:
    paths: tuple[str, ...]
    on_change: OnChange
    stamps: tuple[FileStamp | None, ...]


class Watcher:
    """Poll groups of files; call a group's coroutine once when any of its files changed.

    A group (the TLS cert and key) is reported as one change so that the callback sees both
    files together.  Stamps are recorded *before* the callback runs: a bad edit is reported
    once, and the next edit is a new change.  Files that vanish are ignored until they return.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL) -> None:
        self.interval = interval
        self._watches: list[_Watch] = []

    def add(self, paths: tuple[str, ...], on_change: OnChange) -> None:
        self._watches.append(_Watch(paths, on_change, tuple(stamp(p) for p in paths)))

    async def poll_once(self) -> None:
        for watch in self._watches:
            current = tuple(stamp(p) for p in watch.paths)
            if current == watch.stamps or any(s is None for s in current):
                continue
            watch.stamps = current
            try:
                await watch.on_change()
            except Exception as exc:  # a reload bug must not kill the watcher (or the server)
                logs.server_logger().error("reload callback failed", extra=logs.exception_summary(exc))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.poll_once()


# ---------------------------------------------------------------- TLS


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
        from cryptography import x509

        return x509.load_pem_x509_certificate(self.cert_pem).not_valid_after_utc


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


def new_server_context() -> ssl.SSLContext:
    """A server context refusing anything older than TLS 1.2 (the apiserver speaks 1.2 and 1.3)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return ctx


def check_pair(material: TlsMaterial) -> None:
    """Raise ``ssl.SSLError``/``ValueError`` unless the material is a usable cert + key pair."""
    load_material(new_server_context(), material)
    material.not_after()


class TlsState:
    """The live server context of this process and the files it came from."""

    def __init__(self, cert_path: str, key_path: str) -> None:
        self.cert_path = cert_path
        self.key_path = key_path
        self.context = new_server_context()
        material = TlsMaterial.read(cert_path, key_path)
        load_material(self.context, material)
        metrics.CERT_EXPIRY.set(material.not_after().timestamp())

    async def reload(self) -> None:
        """Check the new pair off the loop, then swap it into the live context on the loop."""
        log = logs.server_logger()
        try:
            material = await asyncio.to_thread(TlsMaterial.read, self.cert_path, self.key_path)
            await asyncio.to_thread(check_pair, material)
        except (OSError, ssl.SSLError, ValueError) as exc:
            metrics.CERT_RELOADS.labels(result="error").inc()
            log.error("serving certificate not reloaded; the old one stays in use",
                      extra={"cert": self.cert_path, "key": self.key_path, "error": str(exc)})
            return
        load_material(self.context, material)
        not_after = material.not_after()
        metrics.CERT_EXPIRY.set(not_after.timestamp())
        metrics.CERT_RELOADS.labels(result="success").inc()
        log.info("serving certificate reloaded",
                 extra={"cert": self.cert_path, "not_after": not_after.isoformat()})


# uvicorn builds the SSL context inside each worker process (``Config.load``), before the app's
# lifespan starts; the app finds that worker's TlsState here to watch and reload it.
_PROCESS_TLS: TlsState | None = None


def process_tls() -> TlsState | None:
    return _PROCESS_TLS


class TlsContextFactory:
    """uvicorn ``ssl_context_factory``: build the context gpuguard keeps and reloads.

    A plain class with two string fields so it pickles into spawned ``--workers`` processes.
    """

    def __init__(self, cert_path: str, key_path: str) -> None:
        self.cert_path = cert_path
        self.key_path = key_path

    def __call__(self, config: object, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        global _PROCESS_TLS
        _PROCESS_TLS = TlsState(self.cert_path, self.key_path)
        return _PROCESS_TLS.context
