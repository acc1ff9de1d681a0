"""Reissue the serving certificate from the existing CA when it nears expiry.

The CA is kept, so the ``caBundle`` in the cluster stays valid and nothing but the two leaf
files changes; the server notices the new files and reloads them without a restart.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from gpuguard.certs.bundle import load_ca
from gpuguard.certs.issue import DEFAULT_SERVING_DAYS, issue_serving_cert, key_type_of, sans_of
from gpuguard.certs.store import CertError, bundle_paths, load_cert, load_key, write_cert, write_key

DEFAULT_RENEW_BEFORE_DAYS = 30


@dataclass(frozen=True)
class RenewResult:
    """What ``renew_serving_cert`` did; ``old_not_after`` is the replaced (or kept) leaf's expiry."""

    renewed: bool
    reason: str
    old_not_after: dt.datetime
    not_after: dt.datetime
    tls_cert: Path
    tls_key: Path


def _issued_by(leaf: x509.Certificate, ca_cert: x509.Certificate) -> bool:
    """Signature check, not a name match: two CAs made by ``certs create`` share a subject name."""
    try:
        leaf.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def renew_serving_cert(
    cert_dir: Path | str,
    days: int = DEFAULT_SERVING_DAYS,
    before_days: float = DEFAULT_RENEW_BEFORE_DAYS,
    force: bool = False,
    now: dt.datetime | None = None,
) -> RenewResult:
    """Replace ``tls.crt``/``tls.key`` in ``cert_dir`` if the leaf expires within ``before_days``.

    The new leaf has the same DNS and IP SANs and key algorithm as the old one, a fresh key,
    and is signed by the CA in the same directory.  It is also reissued when it no longer
    chains to that CA (someone replaced the CA), since such a leaf would fail every handshake.
    """
    now = now or dt.datetime.now(dt.UTC)
    paths = bundle_paths(cert_dir)
    ca = load_ca(cert_dir)
    if ca is None:
        raise CertError(f"no CA in {cert_dir} (expected {paths.ca_cert.name} and {paths.ca_key.name}); "
                        "run `gpuguard certs create` first")
    ca_cert, ca_key = ca
    old = load_cert(paths.tls_cert)
    old_key = load_key(paths.tls_key)
    dns, ips = sans_of(old)
    if not dns and not ips:
        raise CertError(f"{paths.tls_cert} has no subjectAltName; re-run `gpuguard certs create`")

    old_not_after = old.not_valid_after_utc
    remaining = old_not_after - now
    if force:
        reason = "forced"
    elif not _issued_by(old, ca_cert):
        reason = f"{paths.tls_cert.name} was not issued by {paths.ca_cert.name}"
    elif remaining < dt.timedelta(days=before_days):
        reason = (f"expired {-remaining.days} day(s) ago" if remaining.total_seconds() <= 0
                  else f"expires in {remaining.days} day(s), within {before_days:g}")
    else:
        return RenewResult(False, f"valid for {remaining.days} more day(s), more than {before_days:g}",
                           old_not_after, old_not_after, paths.tls_cert, paths.tls_key)

    try:
        cert, key = issue_serving_cert(ca_cert, ca_key, dns, ips, days=days,
                                       key_type=key_type_of(old_key), now=now)
    except ValueError as exc:
        raise CertError(str(exc)) from None
    write_key(paths.tls_key, key)
    write_cert(paths.tls_cert, cert)
    return RenewResult(True, reason, old_not_after, cert.not_valid_after_utc, paths.tls_cert, paths.tls_key)
