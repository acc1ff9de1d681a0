"""When a certificate file stops being valid; the server exports this as a metric."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from certs.store import load_cert


def cert_expiry(path: Path | str) -> dt.datetime:
    """``notAfter`` of the (first) certificate in a PEM file, as an aware UTC datetime.

    Raises ``certs.CertError`` when the file is missing or not a certificate, so callers such
    as the metrics exporter can log one line and keep serving.
    """
    return load_cert(path).not_valid_after_utc


def expires_within(path: Path | str, days: float, now: dt.datetime | None = None) -> bool:
    """True when the certificate at ``path`` expires in less than ``days`` days from ``now``."""
    now = now or dt.datetime.now(dt.UTC)
    return cert_expiry(path) - now < dt.timedelta(days=days)
