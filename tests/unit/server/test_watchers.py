"""The config and the certificate have separate watchers: a slow config reload (a huge or
hostile file) must not delay a certificate renewal, as it did when one watcher polled both."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from types import SimpleNamespace

from gpuguard.webhook.config import load_config
from gpuguard.webhook.engine.core import Engine
from gpuguard.webhook.server import app as app_module
from gpuguard.webhook.server.state import Active, ServerState, ServeSettings


def _touch(path: Path) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(f"{time.time_ns()}\n")
    os.replace(tmp, path)  # a new inode: the stamp changes even within one mtime tick


def test_a_slow_config_reload_does_not_delay_the_certificate(tmp_path: Path):
    config, cert, key = tmp_path / "config.yaml", tmp_path / "tls.crt", tmp_path / "tls.key"
    for path in (config, cert, key):
        _touch(path)
    settings = ServeSettings(config_path=str(config), reload_interval=0.05)
    loaded = load_config(None)
    server = ServerState(settings, Active(loaded, Engine(loaded)))
    events: dict[str, float] = {}

    async def slow_config_reload() -> None:
        # Never done before the test ends (it is cancelled): a certificate reload that waited for it would
        # never come, so no timing is assumed about how fast a busy machine runs the watchers.
        events["config started"] = time.monotonic()
        await asyncio.sleep(3600)
        events["config done"] = time.monotonic()

    async def cert_reload() -> None:
        events["cert"] = time.monotonic()

    server.reload_config = slow_config_reload  # type: ignore[method-assign]
    server.tls = SimpleNamespace(cert_path=str(cert), key_path=str(key), reload=cert_reload)  # type: ignore[assignment]

    async def scenario() -> None:
        watchers = app_module._watchers(server, settings)
        assert [w.name for w in watchers] == ["config", "tls"]
        tasks = [asyncio.create_task(w.run()) for w in watchers]
        _touch(config)
        while "config started" not in events:
            await asyncio.sleep(0.01)
        _touch(cert)
        deadline = time.monotonic() + 60
        while "cert" not in events and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(scenario())
    assert "cert" in events, "the certificate reload waited for the config reload"
    assert "config done" not in events  # the certificate was reloaded while the config reload still ran
