"""What the helpers that run gpuguard as a real process share: stopping its process group, reading /metrics.

The server, the self-managed-certificate servers and the scan are each started in a session of their
own (``start_new_session=True``), so a stop reaches any child they started too.
"""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import urllib.request

SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)$")


def stop_group(proc: subprocess.Popen | None, grace: float = 20.0) -> None:
    """SIGTERM the process group, SIGKILL it if it has not exited within ``grace`` seconds."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def scrape(url: str, context: ssl.SSLContext | None = None) -> dict[str, float]:
    """``name{labels}`` -> value of every sample of a Prometheus text page; empty while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        sample = SAMPLE.match(line)
        if sample:
            out[sample.group(1)] = float(sample.group(2))
    return out
