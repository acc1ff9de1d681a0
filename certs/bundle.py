"""``write_bundle``: a CA plus a serving certificate in one directory, reusing the CA if present.

Reusing the CA is what makes ``certs create`` safe to re-run: the ``caBundle`` already
injected into the webhook configurations keeps matching, so only the leaf changes.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509

from gpuguard.certs.issue import (
    DEFAULT_CA_DAYS,
    DEFAULT_SERVING_DAYS,
    IPAddress,
    KeyType,
    PrivateKey,
    create_ca,
    is_ca,
    issue_serving_cert,
    serving_dns_names,
)
from gpuguard.certs.store import (
    BundlePaths,
    CertError,
    bundle_paths,
    ensure_dir,
    key_matches,
    load_cert,
    load_key,
    write_cert,
    write_key,
)


def load_ca(out_dir: Path | str) -> tuple[x509.Certificate, PrivateKey] | None:
    """The CA in ``out_dir``, or ``None`` when there is none; an error when it is half there or unusable."""
    paths = bundle_paths(out_dir)
    have_cert, have_key = paths.ca_cert.exists(), paths.ca_key.exists()
    if not have_cert and not have_key:
        return None
    if have_cert != have_key:
        present, missing = (paths.ca_cert, paths.ca_key) if have_cert else (paths.ca_key, paths.ca_cert)
        raise CertError(f"found {present} but not {missing}; restore it or remove both to create a new CA")
    cert, key = load_cert(paths.ca_cert), load_key(paths.ca_key)
    if not is_ca(cert):
        raise CertError(f"{paths.ca_cert} is not a CA certificate (BasicConstraints CA:FALSE)")
    if not key_matches(cert, key):
        raise CertError(f"{paths.ca_key} does not belong to {paths.ca_cert}")
    if cert.not_valid_after_utc <= dt.datetime.now(dt.UTC):
        raise CertError(f"the CA in {paths.ca_cert} expired {cert.not_valid_after_utc:%Y-%m-%d}; "
                        "move ca.crt/ca.key away to create a new one, then re-run `certs inject`")
    return cert, key


def write_bundle(
    out_dir: Path | str,
    service: str,
    namespace: str,
    ips: Iterable[IPAddress | str] = (),
    days: int = DEFAULT_SERVING_DAYS,
    *,
    ca_days: int = DEFAULT_CA_DAYS,
    key_type: KeyType = "ec",
) -> BundlePaths:
    """Create (or reuse) ``ca.crt``/``ca.key`` and issue ``tls.crt``/``tls.key`` for the Service.

    ``ips`` adds IP SANs, for webhooks registered by ``clientConfig.url`` (the end-to-end tests
    use 127.0.0.1).  Returns the four paths and whether the CA was new.
    """
    ip_list = [ipaddress.ip_address(ip) if isinstance(ip, str) else ip for ip in ips]
    ensure_dir(out_dir)
    paths = bundle_paths(out_dir)
    existing = load_ca(out_dir)
    if existing is None:
        ca_cert, ca_key = create_ca(common_name=f"gpuguard-ca ({service}.{namespace})", days=ca_days,
                                    key_type=key_type)
        write_key(paths.ca_key, ca_key)
        write_cert(paths.ca_cert, ca_cert)
    else:
        ca_cert, ca_key = existing
    try:
        cert, key = issue_serving_cert(ca_cert, ca_key, serving_dns_names(service, namespace), ip_list,
                                       days=days, key_type=key_type)
    except ValueError as exc:
        raise CertError(str(exc)) from None
    # Key before cert: a reader that sees the new cert already finds its key in place.
    write_key(paths.tls_key, key)
    write_cert(paths.tls_cert, cert)
    return bundle_paths(out_dir, ca_created=existing is None)
