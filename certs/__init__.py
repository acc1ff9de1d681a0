"""TLS for the gpuguard webhook: a CA and serving certificate, caBundle injection, renewal.

The apiserver calls webhooks over HTTPS only and trusts them through the ``caBundle`` in the
webhook configurations, so this package owns the whole life of those certificates.  The
public API is re-exported here; each job lives in its own module:

``issue``   build certificates in memory        ``store``   files: atomic writes, 0600 keys
``bundle``  ``write_bundle`` (create/reuse CA)   ``renew``   reissue the leaf near expiry
``inject``  patch ``caBundle`` via the API       ``cli``     ``gpuguard certs ...``
"""

from __future__ import annotations

from gpuguard.certs.bundle import load_ca, write_bundle
from gpuguard.certs.inject import InjectError, InjectResult, build_ca_bundle_patch, encode_ca_bundle, inject_ca_bundle
from gpuguard.certs.issue import create_ca, issue_serving_cert, serving_dns_names
from gpuguard.certs.renew import RenewResult, renew_serving_cert
from gpuguard.certs.store import BundlePaths, CertError, read_ca_bundle

__all__ = [
    "BundlePaths",
    "CertError",
    "InjectError",
    "InjectResult",
    "RenewResult",
    "build_ca_bundle_patch",
    "create_ca",
    "encode_ca_bundle",
    "inject_ca_bundle",
    "issue_serving_cert",
    "load_ca",
    "read_ca_bundle",
    "renew_serving_cert",
    "serving_dns_names",
    "write_bundle",
]
