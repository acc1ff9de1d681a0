"""``gpuguard serve`` with two benchmark-only switches, set through the environment.

* ``GPUGUARD_BENCH_PROFILE=FILE``: cProfile is switched on by SIGUSR1 and written to FILE by
  SIGUSR2.  Why not ``python -m cProfile``: that profiles the whole process life, so start-up
  (imports, config, TLS) is mixed into the numbers; here only the window under load is.
* ``GPUGUARD_BENCH_GC=freeze,G0,G1,G2``: after the imports, ``gc.collect(); gc.freeze()`` and
  ``gc.set_threshold(G0, G1, G2)`` -- the GC tuning ``gpuguard serve`` applies itself (``webhook/server/app.py``),
  applied from outside to measure a server without it (``python bench/server.py --gc-tuned``).
* ``GPUGUARD_BENCH_INLINE=1``: reviews are judged on the event loop instead of in the engine's
  threads, to measure what the hand-over to a thread costs (``python bench/server.py --breakdown``).

``python bench/_serve.py serve ARGS...`` (the arguments of ``gpuguard serve``).
"""

from __future__ import annotations

import cProfile
import gc
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not bench/

_PROFILE = cProfile.Profile()


def _start(_signum: int, _frame: FrameType | None) -> None:
    _PROFILE.enable()  # signal handlers run on the main thread: the event loop's thread


def _stop(_signum: int, _frame: FrameType | None) -> None:
    _PROFILE.disable()
    _PROFILE.dump_stats(os.environ["GPUGUARD_BENCH_PROFILE"])


def _tune_gc(spec: str) -> None:
    import fastapi  # noqa: F401  (everything a worker holds for life, imported before the freeze)
    import uvicorn  # noqa: F401

    import gpuguard.webhook.server.app  # noqa: F401
    from gpuguard.webhook.config import load_config
    from gpuguard.webhook.engine.core import Engine

    Engine(load_config(None))
    parts = spec.split(",")
    gc.collect()
    if parts[0] == "freeze":
        gc.freeze()
        parts = parts[1:]
    if len(parts) == 3:
        gc.set_threshold(*(int(p) for p in parts))


def _judge_inline() -> None:
    from gpuguard.webhook.server import review

    threaded = review._judge_in_time

    async def inline(server: Any, endpoint: str, req: Any, pool: Any) -> Any:
        return await threaded(server, endpoint, req, None)  # no pool: the engine runs on the event loop

    review._judge_in_time = inline  # type: ignore[assignment]


def main() -> int:
    """Apply the switches, then hand over to ``gpuguard``'s own CLI unchanged."""
    if os.environ.get("GPUGUARD_BENCH_INLINE"):
        _judge_inline()
    if os.environ.get("GPUGUARD_BENCH_GC"):
        _tune_gc(os.environ["GPUGUARD_BENCH_GC"])
    if os.environ.get("GPUGUARD_BENCH_PROFILE"):
        signal.signal(signal.SIGUSR1, _start)
        signal.signal(signal.SIGUSR2, _stop)
    from gpuguard.webhook.main import main as gpuguard_main

    return gpuguard_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
