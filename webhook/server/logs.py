"""Structured JSON logs for the webhook server: one line per event on stderr.

Log shippers (Fluent Bit, Vector, Loki's promtail) parse one JSON object per line without
extra configuration, and a fixed field set makes "which policy denied what, for whom" a
query instead of a regex.  What is never logged: object contents, request bodies, tokens,
``userInfo.extra`` (it can carry credentials from authenticating proxies) and tracebacks'
local values — exceptions are reduced to their type, a short message and frame locations.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

import orjson

REVIEW_LOGGER = "gpuguard.review"
SERVER_LOGGER = "gpuguard.server"

# LogRecord attributes that are plumbing, not payload; everything else a caller passes through
# ``extra=`` is emitted as a top-level field.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime", "color_message"}
_MAX_EXC_MESSAGE = 200


def exception_summary(exc: BaseException) -> dict[str, Any]:
    """Type, a short message and ``file:line in function`` frames — enough to debug, no locals."""
    frames = traceback.extract_tb(exc.__traceback__)[-6:]
    message = str(exc)
    if len(message) > _MAX_EXC_MESSAGE:
        message = message[: _MAX_EXC_MESSAGE - 1] + "…"
    return {
        "exc_type": type(exc).__name__,
        "exc_message": message,
        "exc_frames": [f"{f.filename}:{f.lineno} in {f.name}" for f in frames],
    }


class JsonFormatter(logging.Formatter):
    """Render a record as one JSON object: ts, level, logger, msg, then the ``extra`` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key == "fields" and isinstance(value, dict):
                entry.update(value)
            elif key not in _RECORD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            entry.update(exception_summary(record.exc_info[1]))
        return orjson.dumps(entry, default=str).decode()


def uvicorn_log_config(level: str = "info") -> dict[str, Any]:
    """A ``logging.config`` dict that sends uvicorn's and gpuguard's loggers through ``JsonFormatter``.

    Passed to ``uvicorn.Config(log_config=...)`` so worker processes (spawned, with fresh
    logging state) configure themselves the same way.  uvicorn's access log is dropped: the
    per-review line carries more and the probes would drown it.
    """
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "gpuguard.webhook.server.logs.JsonFormatter"},
            # uvicorn pokes at these two names when use_colors is set; keep them defined.
            "default": {"()": "gpuguard.webhook.server.logs.JsonFormatter"},
            "access": {"()": "gpuguard.webhook.server.logs.JsonFormatter"},
        },
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "gpuguard": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }


def configure(level: str = "info") -> None:
    """Configure logging in the current process (the serve command before uvicorn starts)."""
    import logging.config

    logging.config.dictConfig(uvicorn_log_config(level))


# A request field is the requester's text (a 2 MB uid, a name, a user): each is logged at most this long.
MAX_LOGGED_FIELD = 256


def capped(value: Any) -> Any:
    """``value`` with every string in it (lists too) cut to ``MAX_LOGGED_FIELD`` characters."""
    if isinstance(value, str) and len(value) > MAX_LOGGED_FIELD:
        return value[: MAX_LOGGED_FIELD - 1] + "…"
    if isinstance(value, list):
        return [capped(v) for v in value[:64]]
    return value


_REVIEW_MESSAGE = "admission review"


def log_review(**fields: Any) -> None:
    """Emit the one line a review produces; callers pass only envelope-derived fields, each size-capped.

    Where logging is as ``gpuguard serve`` configures it (``uvicorn_log_config``: JSON lines on stderr), the line
    is written straight to the handlers' streams, the same text ``JsonFormatter`` makes of the record: a LogRecord
    and its formatting cost about as much as the rest of a small review's plumbing.  Any other setup (a test's
    handler, a filter, another formatter) gets the record through ``logging`` as before.
    """
    capped_fields = {k: capped(v) for k, v in fields.items()}
    logger = logging.getLogger(REVIEW_LOGGER)
    handlers = _json_stream_handlers(logger)
    if handlers is None:
        # Nested under "fields": LogRecord refuses extras that shadow its own attributes ("name").
        logger.info(_REVIEW_MESSAGE, extra={"fields": capped_fields})
        return
    if not handlers:
        return
    now = time.time()
    entry: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
        "level": "info", "logger": REVIEW_LOGGER, "msg": _REVIEW_MESSAGE, **capped_fields}
    line = orjson.dumps(entry, default=str).decode()
    for handler in handlers:
        handler.acquire()
        try:
            handler.stream.write(line + handler.terminator)
            handler.flush()
        except Exception:  # as logging does: a broken stream never fails the review
            handler.handleError(logging.makeLogRecord({"msg": _REVIEW_MESSAGE}))
        finally:
            handler.release()


def _json_stream_handlers(logger: logging.Logger) -> list[logging.StreamHandler] | None:
    """The stream handlers a review line reaches when they all format with ``JsonFormatter`` and nothing filters
    on the way ([] where INFO is off); ``None`` for any other setup."""
    if not logger.isEnabledFor(logging.INFO):
        return []
    handlers: list[logging.StreamHandler] = []
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if type(handler) is not logging.StreamHandler or handler.filters or \
                    not isinstance(handler.formatter, JsonFormatter):
                return None
            if handler.level <= logging.INFO:
                handlers.append(handler)
        current = current.parent if current.propagate else None
    return handlers


def server_logger() -> logging.Logger:
    return logging.getLogger(SERVER_LOGGER)


def print_error(message: str) -> None:
    """Startup errors for a human at a terminal: ``gpuguard: error: ...`` on stderr, no traceback."""
    print(f"gpuguard: error: {message}", file=sys.stderr)
