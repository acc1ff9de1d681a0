"""Hot reload of the config file and the serving certificate: noticing that a file changed.

Why polling: ConfigMap and Secret volumes are updated by swapping a ``..data`` symlink to a
new timestamped directory, which inotify on the visible path never reports; polling
``os.stat`` (which follows the symlink to the resolved target) every couple of seconds sees
every kind of update — swap, rewrite, ``mv`` over — at negligible cost.  A file's identity is
its resolved path, device, inode, size and mtime, so a same-size rewrite within one mtime tick
is still caught by the inode change of an atomic replace.

Why one watcher per file group: a slow config reload (a large or hostile file) must never
delay a certificate renewal, so each group polls in its own task.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gpuguard.webhook.server import logs

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

    def __init__(self, interval: float = DEFAULT_INTERVAL, name: str = "files") -> None:
        self.interval = interval
        self.name = name
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
