"""The review line (``logs.log_review``): written straight to the JSON handlers as ``gpuguard serve`` sets them up,
the same line ``JsonFormatter`` makes of a record; through ``logging`` for any other setup."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from gpuguard.webhook.server import logs

FIELDS = {"endpoint": "mutate", "uid": "u" * 300, "kind": "Job", "namespace": "ml", "name": "train",
          "user": "alice", "decision": "allowed", "policies": ["checkpoint-volume"], "patch_ops": 3,
          "latency_ms": 1.25, "dry_run": False}


@pytest.fixture
def served() -> Iterator[io.StringIO]:
    """Logging as ``gpuguard serve`` configures it, its stderr handler writing into a buffer."""
    saved = {name: (lg.handlers[:], lg.level, lg.propagate) for name in ("gpuguard", "uvicorn")
             for lg in [logging.getLogger(name)]}
    logs.configure("info")
    out = io.StringIO()
    (handler,) = logging.getLogger("gpuguard").handlers
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    yield out
    for name, (handlers, level, propagate) in saved.items():
        lg = logging.getLogger(name)
        lg.handlers[:], lg.propagate = handlers, propagate
        lg.setLevel(level)


def _formatted(fields: dict) -> dict:
    record = logging.makeLogRecord({"name": logs.REVIEW_LOGGER, "levelno": logging.INFO, "levelname": "INFO",
                                    "msg": "admission review", "fields": fields})
    return orjson.loads(logs.JsonFormatter().format(record))


def test_the_direct_line_is_the_formatters_line(served: io.StringIO) -> None:
    logs.log_review(**FIELDS)
    (line,) = served.getvalue().splitlines()
    written = orjson.loads(line)
    expected = _formatted({k: logs.capped(v) for k, v in FIELDS.items()})
    assert written.pop("ts")[:4] == expected.pop("ts")[:4]  # the year: the rest is the clock
    assert written == expected and list(written) == list(expected)
    assert len(written["uid"]) == logs.MAX_LOGGED_FIELD


def test_info_off_writes_nothing(served: io.StringIO) -> None:
    logging.getLogger("gpuguard").setLevel(logging.WARNING)
    logs.log_review(**FIELDS)
    assert served.getvalue() == ""


def test_another_handler_gets_the_record_as_before(served: io.StringIO) -> None:
    """A handler of another kind (a test's, a shipper's) sees the record with its fields, not a pre-made line."""
    seen: list[logging.LogRecord] = []

    class Records(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    extra = Records()
    logging.getLogger(logs.REVIEW_LOGGER).addHandler(extra)
    try:
        logs.log_review(**FIELDS)
    finally:
        logging.getLogger(logs.REVIEW_LOGGER).removeHandler(extra)
    (record,) = seen
    assert record.fields["kind"] == "Job"  # type: ignore[attr-defined]
    assert orjson.loads(served.getvalue())["kind"] == "Job"  # the JSON handler still writes its line
