"""Self-managed certificates: what the server does next with its Secret, decided as a pure function.

``gpuguard serve --self-managed-certs SECRET`` keeps its CA and serving certificate in one Secret
that every replica reads.  Each replica, every few seconds, parses the Secret (:func:`parse`),
asks :func:`decide` for the one step due now, makes it (:func:`apply`) and writes the Secret back
with its ``resourceVersion``: when two replicas decide at once, the apiserver accepts one write
and the other re-reads, so the replicas never fork.  Nothing here touches the cluster or a clock;
the inputs are the Secret, the time and which CAs the live webhook configurations trust.

Why the steps come in this order (no admission review may ever fail with an x509 error):

* ``create`` only when no webhook trusts any CA yet (a fresh install ships the webhook
  configurations empty, and the server writes the webhooks with the ``caBundle`` afterwards);
* ``renew`` reissues the serving certificate from the same CA at 2/3 of its life: the apiserver
  trusts the CA, so the old and the new certificate are both good at every moment;
* a CA rotation is three steps: ``stage`` puts a new CA into the bundle next to the current one
  (the replicas then write that bundle into the webhook configurations), ``mark`` records when
  every webhook was first seen trusting it, ``switch`` serves a certificate signed by the new CA
  once that trust is ``overlap`` old (time for every apiserver to load the configuration);
  ``retire`` drops the old CA from the bundle ``overlap`` after the switch (time for every replica
  to load the new certificate).  A rotation starts at 2/3 of the CA's life, when the signing CA is
  unusable, or when an admin annotates the Secret ``gpuguard.io/rotate-ca``.

The bundle changes only at ``create``, ``stage`` and ``retire``, and each change raises a serial
kept in the Secret's annotations; a replica writes the webhook configurations only with a serial at
least the one they carry (:func:`desired_configuration`), so a replica that read the Secret a
moment ago can never put an older bundle back.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from gpuguard.certs.issue import PrivateKey, create_ca, is_ca, issue_serving_cert, sans_of
from gpuguard.certs.store import cert_pem, key_matches, key_pem

# Secret keys.  ``ca.crt`` is the trust bundle (what ``caBundle`` gets), as in cert-manager's Secrets.
BUNDLE = "ca.crt"
SIGNER_CERT, SIGNER_KEY = "signer.crt", "signer.key"
NEXT_CERT, NEXT_KEY = "next-signer.crt", "next-signer.key"
TLS_CERT, TLS_KEY = "tls.crt", "tls.key"
# Annotations on the Secret (and SERIAL, DIGEST on the webhook configurations).
SERIAL = "gpuguard.io/ca-bundle-serial"
TRUSTED_AT = "gpuguard.io/next-ca-trusted-at"
SWITCHED_AT = "gpuguard.io/ca-switched-at"
ROTATE = "gpuguard.io/rotate-ca"
DIGEST = "gpuguard.io/webhooks-sha256"

RENEW_AT = 2 / 3  # renew a certificate (start a CA rotation) when this share of its lifetime has passed

Action = Literal["create", "renew", "stage", "mark", "switch", "retire"]


@dataclass(frozen=True)
class Lifetimes:
    """How long the CA and the serving certificate live, and how long each rotation step waits.

    ``overlap`` is waited twice in a CA rotation: after the webhooks trust the new CA before
    serving from it, and after the switch before the old CA leaves the bundle.
    """

    ca: dt.timedelta = dt.timedelta(days=3 * 365)
    serving: dt.timedelta = dt.timedelta(days=90)
    overlap: dt.timedelta = dt.timedelta(minutes=10)

    def problems(self) -> list[str]:
        out = []
        if self.ca <= dt.timedelta(0) or self.serving <= dt.timedelta(0) or self.overlap < dt.timedelta(0):
            out.append("lifetimes must be positive and the overlap not negative")
        elif 2 * self.overlap >= self.ca * (1 - RENEW_AT):
            out.append("the CA lifetime must be more than 6 times the overlap (a rotation starts when "
                       "1/3 of the CA's life is left and takes two overlaps)")
        return out


@dataclass(frozen=True)
class Hosts:
    """The names the serving certificate must carry: the Service's DNS names, and IPs for URL webhooks."""

    dns: tuple[str, ...]
    ips: tuple[str, ...] = ()

    def matches(self, cert: x509.Certificate) -> bool:
        dns, ips = sans_of(cert)
        return set(dns) == set(self.dns) and {str(ip) for ip in ips} == set(self.ips)


@dataclass(frozen=True)
class Pair:
    """A certificate with its private key."""

    cert: x509.Certificate
    key: PrivateKey


@dataclass(frozen=True)
class CertState:
    """What the Secret holds, parsed; ``problems`` says what could not be read (and is then ignored)."""

    signer: Pair | None = None
    next: Pair | None = None
    previous: tuple[x509.Certificate, ...] = ()
    serving: Pair | None = None
    serial: int = 0
    trusted_at: dt.datetime | None = None
    switched_at: dt.datetime | None = None
    rotate_requested: bool = False
    problems: tuple[str, ...] = ()

    def bundle(self) -> tuple[x509.Certificate, ...]:
        """The CAs a client must trust: signer, next and previous, in a stable order (oldest first),
        so that a ``switch``, which only moves CAs between roles, leaves the bundle's bytes alone."""
        certs = {fingerprint(c): c for c in (*(p.cert for p in (self.signer, self.next) if p), *self.previous)}
        return tuple(sorted(certs.values(), key=lambda c: (c.not_valid_before_utc, fingerprint(c))))

    def bundle_pem(self) -> bytes:
        return b"".join(cert_pem(c) for c in self.bundle())


@dataclass(frozen=True)
class Step:
    action: Action
    reason: str


def fingerprint(cert: x509.Certificate) -> str:
    return cert.fingerprint(hashes.SHA256()).hex()


# ---------------------------------------------------------------- the Secret, both ways


def _pair(data: Mapping[str, bytes], cert_key: str, key_key: str, problems: list[str]) -> Pair | None:
    cert_bytes, key_bytes = data.get(cert_key), data.get(key_key)
    if not cert_bytes and not key_bytes:
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_bytes or b"")
        key = serialization.load_pem_private_key(key_bytes or b"", password=None)
    except (ValueError, TypeError):
        problems.append(f"{cert_key}/{key_key} is not a PEM certificate and key")
        return None
    if not isinstance(key, PrivateKey) or not key_matches(cert, key):  # type: ignore[arg-type,misc]
        problems.append(f"{key_key} does not belong to {cert_key}")
        return None
    return Pair(cert, key)


def _time(value: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def parse(data: Mapping[str, bytes], annotations: Mapping[str, str]) -> CertState:
    """The Secret's data (decoded bytes) and annotations as a :class:`CertState`."""
    problems: list[str] = []
    signer = _pair(data, SIGNER_CERT, SIGNER_KEY, problems)
    nxt = _pair(data, NEXT_CERT, NEXT_KEY, problems)
    serving = _pair(data, TLS_CERT, TLS_KEY, problems)
    previous: list[x509.Certificate] = []
    if data.get(BUNDLE):
        try:
            bundle = x509.load_pem_x509_certificates(data[BUNDLE])
        except ValueError:
            problems.append(f"{BUNDLE} is not a PEM certificate bundle")
            bundle = []
        known = {fingerprint(p.cert) for p in (signer, nxt) if p}
        previous = [c for c in bundle if is_ca(c) and fingerprint(c) not in known]
    serial_text = annotations.get(SERIAL, "0")
    serial = int(serial_text) if re.fullmatch(r"\d{1,18}", serial_text) else 0
    return CertState(signer, nxt, tuple(previous), serving, serial, _time(annotations.get(TRUSTED_AT)),
                     _time(annotations.get(SWITCHED_AT)), ROTATE in annotations, tuple(problems))


def render(state: CertState) -> tuple[dict[str, bytes], dict[str, str | None]]:
    """The Secret's data and the annotations to set (``None``: remove) for ``state``."""
    data: dict[str, bytes] = {}
    for cert_key, key_key, pair in ((SIGNER_CERT, SIGNER_KEY, state.signer), (NEXT_CERT, NEXT_KEY, state.next),
                                    (TLS_CERT, TLS_KEY, state.serving)):
        if pair is not None:
            data[cert_key], data[key_key] = cert_pem(pair.cert), key_pem(pair.key)
    if state.bundle():
        data[BUNDLE] = state.bundle_pem()
    annotations: dict[str, str | None] = {
        SERIAL: str(state.serial),
        TRUSTED_AT: state.trusted_at.isoformat() if state.trusted_at else None,
        SWITCHED_AT: state.switched_at.isoformat() if state.switched_at else None,
        ROTATE: "" if state.rotate_requested else None,
    }
    return data, annotations


# ---------------------------------------------------------------- the decision


def _usable_ca(pair: Pair | None, now: dt.datetime) -> bool:
    return (pair is not None and is_ca(pair.cert)
            and pair.cert.not_valid_before_utc <= now < pair.cert.not_valid_after_utc)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """Whether ``ca`` signed ``cert`` (a signature check: two gpuguard CAs may share a name)."""
    try:
        cert.verify_directly_issued_by(ca)
    except Exception:  # InvalidSignature, a name mismatch (ValueError), an unsupported key (TypeError)
        return False
    return True


def serving_problem(state: CertState, now: dt.datetime, lifetimes: Lifetimes, hosts: Hosts) -> str | None:
    """Why the serving certificate must be reissued from the signer now, or ``None``."""
    if state.serving is None:
        return "there is no serving certificate"
    assert state.signer is not None
    cert = state.serving.cert
    if not issued_by(cert, state.signer.cert):
        return "the serving certificate was not issued by the signing CA"
    if not hosts.matches(cert):
        return "the serving certificate does not name exactly the configured hosts"
    left = cert.not_valid_after_utc - now
    if left <= lifetimes.serving * (1 - RENEW_AT):
        return f"the serving certificate expires in {max(left.total_seconds(), 0):.0f} s"
    return None


def _rotation_due(state: CertState, now: dt.datetime, lifetimes: Lifetimes) -> str | None:
    assert state.signer is not None
    if state.rotate_requested:
        return f"the Secret is annotated {ROTATE}"
    left = state.signer.cert.not_valid_after_utc - now
    if left <= lifetimes.ca * (1 - RENEW_AT):
        return f"the signing CA expires in {max(left.total_seconds(), 0):.0f} s"
    return None


def _retire_due(state: CertState, now: dt.datetime, lifetimes: Lifetimes) -> str | None:
    if not state.previous:
        return None
    if any(c.not_valid_after_utc <= now for c in state.previous):
        return "a previous CA has expired"
    if state.switched_at is None or now >= state.switched_at + lifetimes.overlap:
        return "the overlap after the switch has passed"
    return None


def _next_step(state: CertState, now: dt.datetime, lifetimes: Lifetimes, trusted: frozenset[str]) -> Step | None:
    """The steps of a CA rotation in progress: mark the webhooks' trust, then switch."""
    assert state.next is not None
    is_trusted = fingerprint(state.next.cert) in trusted
    if is_trusted != (state.trusted_at is not None):
        return Step("mark", "every webhook trusts the new CA" if is_trusted
                    else "a webhook no longer trusts the new CA")
    if is_trusted and state.trusted_at is not None and now >= state.trusted_at + lifetimes.overlap:
        return Step("switch", "the webhooks have trusted the new CA for the overlap")
    return None


def decide(state: CertState, now: dt.datetime, lifetimes: Lifetimes, hosts: Hosts,
           trusted: frozenset[str]) -> Step | None:
    """The one step due now, or ``None`` when the Secret is as it should be.

    ``trusted``: fingerprints of the CAs that every webhook of both live configurations trusts
    (empty while they have no webhooks, as on a fresh install).
    """
    signer_ok = _usable_ca(state.signer, now)
    if not signer_ok and state.next is None:
        if not trusted:
            return Step("create", "no usable CA, and no webhook trusts one yet")
        return Step("stage", "the signing CA is missing or unusable")
    if state.next is not None:
        step = _next_step(state, now, lifetimes, trusted)
        if step is not None:
            return step
    if not signer_ok:
        return None  # waiting for the webhooks to trust the new CA
    problem = serving_problem(state, now, lifetimes, hosts)
    if problem:
        return Step("renew", problem)
    if state.next is None:
        due = _rotation_due(state, now, lifetimes)
        if due:
            return Step("stage", due)
    due = _retire_due(state, now, lifetimes)
    return Step("retire", due) if due else None


def _new_ca(now: dt.datetime, lifetimes: Lifetimes) -> Pair:
    cert, key = create_ca(common_name=f"gpuguard-ca {now:%Y-%m-%dT%H:%M:%SZ}", lifetime=lifetimes.ca, now=now)
    return Pair(cert, key)


def _serving(signer: Pair, now: dt.datetime, lifetimes: Lifetimes, hosts: Hosts) -> Pair:
    cert, key = issue_serving_cert(signer.cert, signer.key, hosts.dns, hosts.ips, lifetime=lifetimes.serving, now=now)
    return Pair(cert, key)


def apply(step: Step, state: CertState, now: dt.datetime, lifetimes: Lifetimes, hosts: Hosts) -> CertState:
    """``state`` after ``step`` (new keys are generated here); the serial rises when the bundle changes."""
    if step.action == "create":
        signer = _new_ca(now, lifetimes)
        return CertState(signer=signer, serving=_serving(signer, now, lifetimes, hosts), serial=state.serial + 1)
    if step.action == "renew":
        assert state.signer is not None
        return replace(state, serving=_serving(state.signer, now, lifetimes, hosts))
    if step.action == "stage":
        return replace(state, next=_new_ca(now, lifetimes), trusted_at=None, rotate_requested=False,
                       serial=state.serial + 1)
    if step.action == "mark":
        return replace(state, trusted_at=None if state.trusted_at else now)
    if step.action == "switch":
        assert state.next is not None
        old = (state.signer.cert,) if state.signer and is_ca(state.signer.cert) else ()
        return replace(state, signer=state.next, next=None, previous=(*state.previous, *old),
                       serving=_serving(state.next, now, lifetimes, hosts), trusted_at=None, switched_at=now,
                       rotate_requested=False)
    if step.action == "retire":
        return replace(state, previous=(), switched_at=None, serial=state.serial + 1)
    raise ValueError(f"unknown step {step.action!r}")


# ---------------------------------------------------------------- the webhook configurations


def bundle_of(configuration: Mapping[str, Any]) -> list[frozenset[str]]:
    """For each webhook of a live configuration, the fingerprints of the CAs its caBundle holds."""
    out = []
    for hook in configuration.get("webhooks") or []:
        encoded = (hook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            certs = x509.load_pem_x509_certificates(base64.b64decode(encoded)) if encoded else []
        except ValueError:
            certs = []
        out.append(frozenset(fingerprint(c) for c in certs))
    return out


def trusted_by_all(configurations: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The CAs every webhook of every configuration trusts (empty when there is no webhook)."""
    sets = [s for conf in configurations for s in bundle_of(conf)]
    return frozenset.intersection(*sets) if sets else frozenset()


def _digest(webhooks: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(webhooks, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def desired_configuration(live: Mapping[str, Any], template: Mapping[str, Any], bundle_pem: bytes,
                          serial: int) -> dict[str, Any] | None:
    """The body that puts the template's webhooks with this ``caBundle`` into ``live``, or ``None``
    when ``live`` already has them or carries a newer bundle (a higher serial: never go back).

    The body keeps ``live``'s ``resourceVersion``, so a write over someone else's change fails
    (409) instead of undoing it.  What the apiserver defaults in the stored webhooks does not count
    as a difference: the template's digest, kept in an annotation, does.
    """
    annotations = dict((live.get("metadata") or {}).get("annotations") or {})
    live_serial = annotations.get(SERIAL, "")
    if live_serial.isdigit() and int(live_serial) > serial:
        return None
    ca_bundle = base64.b64encode(bundle_pem).decode("ascii")
    webhooks = [{**hook, "clientConfig": {**(hook.get("clientConfig") or {}), "caBundle": ca_bundle}}
                for hook in template.get("webhooks") or []]
    digest = _digest(webhooks)
    live_bundles = [(h.get("clientConfig") or {}).get("caBundle") for h in live.get("webhooks") or []]
    if (annotations.get(DIGEST) == digest and live_serial == str(serial)
            and len(live_bundles) == len(webhooks) and set(live_bundles) <= {ca_bundle}):
        return None
    annotations.update({SERIAL: str(serial), DIGEST: digest})
    body = {key: value for key, value in live.items() if key != "webhooks"}
    metadata = {k: v for k, v in (live.get("metadata") or {}).items() if k != "managedFields"}  # the server's
    body["metadata"] = {**metadata, "annotations": annotations}
    body["webhooks"] = webhooks
    return body


def parse_duration(text: str) -> dt.timedelta:
    """``90d``, ``12h``, ``30m``, ``45s`` (or plain seconds) as a timedelta; ``ValueError`` otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 90d, 12h, 30m, 45s)")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
    return dt.timedelta(seconds=float(match[1]) * unit)
