"""``serve --self-managed-certs SECRET``: keep the Secret, the webhook configurations and this
replica's serving certificate in step, every few seconds.

One pass (:meth:`SelfManagedCerts.reconcile`), the same in every replica:

1. read the Secret, the ConfigMap holding the full webhook configurations (the installed ones are
   empty skeletons), and the two live configurations;
2. make the step :func:`gpuguard.certs.selfmanaged.decide` says is due, if any, and write the
   Secret with its ``resourceVersion`` (a 409 means another replica wrote first: read again);
3. write the webhooks, with the Secret's bundle as ``caBundle``, into gpuguard's own two
   configurations, again with their ``resourceVersion``, never with an older bundle;
4. when the Secret's serving pair differs from the one served, write it into this replica's
   private directory and reload the live TLS context from it (``tls.TlsState.reload``).

A replica is ready only when the live webhooks trust the CA of the certificate it serves, so the
apiserver is never sent to a replica it would refuse.  The passes run in a thread (the API client
blocks) and are bounded: every API call has a timeout, a pass makes at most one step.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from cryptography import x509

from gpuguard.certs import selfmanaged as sm
from gpuguard.certs.inject import MUTATING, VALIDATING
from gpuguard.certs.store import atomic_write, cert_pem, key_pem
from gpuguard.webhook.server import logs, metrics
from gpuguard.webhook.server.webhook_template import template_problems

TEMPLATE_KEY = "webhooks.yaml"
API_TIMEOUT = 10
DEFAULT_INTERVAL = 10.0
BOOTSTRAP_PASSES = 10


class CertSetupError(Exception):
    """The Secret or the webhook configurations can't be read or written; shown as one line."""


@dataclass(frozen=True)
class Options:
    """What the server was told; ``hosts`` names the serving certificate must carry."""

    secret: str
    namespace: str
    hosts: sm.Hosts
    lifetimes: sm.Lifetimes
    webhooks_configmap: str = "gpuguard-webhooks"
    directory: str = ""
    interval: float = DEFAULT_INTERVAL
    service: str = "gpuguard"  # the Service the template's webhooks must call (or a URL to one of ``hosts``)


@dataclass
class _Live:
    secret: dict[str, Any] | None
    template: dict[str, dict[str, Any]]
    configurations: dict[str, dict[str, Any] | None] = field(default_factory=dict)


class _Api:
    """The few calls this needs, as raw JSON (the client's models reject newer fields)."""

    def __init__(self, api_client: Any) -> None:
        from gpuguard.kubeapi.client import ApiError, admissionregistration_v1, core_v1

        self.error = ApiError
        self.core = core_v1(api_client)
        self.admission = admissionregistration_v1(api_client)

    def _json(self, call: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            response = call(*args, _request_timeout=API_TIMEOUT, _preload_content=False)
        except self.error as exc:
            if exc.status == 404:
                return None
            raise
        result: dict[str, Any] = json.loads(response.data)
        return result

    def read_secret(self, ns: str, name: str) -> dict[str, Any] | None:
        return self._json(self.core.read_namespaced_secret, name, ns)

    def create_secret(self, ns: str, body: dict[str, Any]) -> dict[str, Any] | None:
        return self._json(self.core.create_namespaced_secret, ns, body)

    def replace_secret(self, ns: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        return self._json(self.core.replace_namespaced_secret, name, ns, body)

    def read_configmap(self, ns: str, name: str) -> dict[str, Any] | None:
        return self._json(self.core.read_namespaced_config_map, name, ns)

    def read_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        read = (self.admission.read_mutating_webhook_configuration if kind == MUTATING
                else self.admission.read_validating_webhook_configuration)
        return self._json(read, name)

    def replace_configuration(self, kind: str, name: str, body: dict[str, Any]) -> dict[str, Any] | None:
        write = (self.admission.replace_mutating_webhook_configuration if kind == MUTATING
                 else self.admission.replace_validating_webhook_configuration)
        return self._json(write, name, body)


def from_client(api_client: Any, opts: Options) -> SelfManagedCerts:
    """The self-managed certificates of this process, talking to the cluster through ``api_client``."""
    return SelfManagedCerts(_Api(api_client), opts)


def _decoded(secret: dict[str, Any] | None) -> tuple[dict[str, bytes], dict[str, str]]:
    if not secret:
        return {}, {}
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    return data, dict((secret.get("metadata") or {}).get("annotations") or {})


def secret_body(opts: Options, live: dict[str, Any] | None, state: sm.CertState) -> dict[str, Any]:
    """The Secret to write for ``state``: ``live`` with our keys and annotations replaced (its
    ``resourceVersion`` kept for the compare-and-swap), or a new Secret."""
    data, annotations = sm.render(state)
    body = dict(live) if live else {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {
        "name": opts.secret, "namespace": opts.namespace, "labels": {"app.kubernetes.io/name": "gpuguard"}}}
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}  # the server's
    merged = dict(metadata.get("annotations") or {})
    for key, value in annotations.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    metadata["annotations"] = merged
    body["metadata"] = metadata
    body["data"] = {k: base64.b64encode(v).decode("ascii") for k, v in data.items()}
    return body


class SelfManagedCerts:
    """The self-managed certificate state of one server process."""

    def __init__(self, api: Any, opts: Options) -> None:
        self.api = api  # an _Api, or anything with its methods and ``error`` (the tests' in-memory cluster)
        self.opts = opts
        self.directory = opts.directory or tempfile.mkdtemp(prefix="gpuguard-tls-")
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        self.cert_path = os.path.join(self.directory, "tls.crt")
        self.key_path = os.path.join(self.directory, "tls.key")
        self.written: bytes | None = None  # the serving certificate in the files
        self.served: bytes | None = None  # the serving certificate the TLS context has loaded
        self.state = sm.CertState()
        self.ready_reason: str | None = "webhook configurations not written yet"
        self.last_error: str | None = None
        self._last_live: _Live | None = None

    # -- reading and deciding ---------------------------------------------------------------

    def _read(self) -> _Live:
        opts = self.opts
        secret = self.api.read_secret(opts.namespace, opts.secret)
        configmap = self.api.read_configmap(opts.namespace, opts.webhooks_configmap)
        if configmap is None:
            raise CertSetupError(f"ConfigMap {opts.namespace}/{opts.webhooks_configmap} (the webhooks to "
                                 "write) not found")
        text = (configmap.get("data") or {}).get(TEMPLATE_KEY, "")
        try:
            docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
        except yaml.YAMLError as exc:
            raise CertSetupError(f"ConfigMap {opts.webhooks_configmap}: {TEMPLATE_KEY} is not YAML: {exc}") from None
        template = {d.get("kind", ""): d for d in docs if d.get("kind") in (MUTATING, VALIDATING)}
        if len(template) != 2:
            raise CertSetupError(f"ConfigMap {opts.webhooks_configmap}: {TEMPLATE_KEY} must hold one "
                                 f"{MUTATING} and one {VALIDATING}")
        foreign = template_problems(template.values(), opts.namespace, opts.service,
                                    (*opts.hosts.dns, *opts.hosts.ips))
        if foreign:
            metrics.CERT_STEPS.labels(step="webhooks", result="refused").inc()
            raise CertSetupError(f"ConfigMap {opts.webhooks_configmap}: refusing to write webhooks that are not "
                                 f"gpuguard's own ({len(foreign)}): " + "; ".join(foreign[:3]))
        live = _Live(secret, template)
        for kind, doc in template.items():
            live.configurations[kind] = self.api.read_configuration(kind, doc["metadata"]["name"])
        return live

    def _trusted(self, live: _Live) -> frozenset[str]:
        return sm.trusted_by_all(c for c in live.configurations.values() if c is not None)

    def _step(self, live: _Live, now: dt.datetime) -> bool:
        """Make the step due now, if any, and write it; True when the Secret changed."""
        data, annotations = _decoded(live.secret)
        state = sm.parse(data, annotations)
        for problem in state.problems:
            logs.server_logger().warning("self-managed certificate Secret: ignoring unusable content",
                                         extra={"secret": self.opts.secret, "problem": problem})
        step = sm.decide(state, now, self.opts.lifetimes, self.opts.hosts, self._trusted(live))
        if step is None:
            self.state = state
            return False
        new = sm.apply(step, state, now, self.opts.lifetimes, self.opts.hosts)
        body = secret_body(self.opts, live.secret, new)
        try:
            if live.secret is None:
                written = self.api.create_secret(self.opts.namespace, body)
            else:
                written = self.api.replace_secret(self.opts.namespace, self.opts.secret, body)
        except self.api.error as exc:
            if exc.status == 409:  # another replica's step won: read what it wrote on the next pass
                metrics.CERT_STEPS.labels(step=step.action, result="conflict").inc()
                return True
            raise
        metrics.CERT_STEPS.labels(step=step.action, result="success").inc()
        logs.server_logger().info("self-managed certificates: step made", extra={
            "step": step.action, "reason": step.reason, "serial": new.serial})
        live.secret = written
        self.state = new
        return True

    # -- writing the webhooks and the local files -------------------------------------------

    def _write_webhooks(self, live: _Live) -> None:
        bundle = self.state.bundle_pem()
        if not bundle:
            return
        for kind, template in live.template.items():
            current = live.configurations.get(kind)
            name = template["metadata"]["name"]
            if current is None:
                raise CertSetupError(f"{kind} {name!r} not found: apply the chart or kustomization first "
                                     "(the server fills in an existing configuration, it never creates one)")
            body = sm.desired_configuration(current, template, bundle, self.state.serial)
            if body is None:
                continue
            try:
                live.configurations[kind] = self.api.replace_configuration(kind, name, body)
            except self.api.error as exc:
                if exc.status != 409:
                    raise
                live.configurations[kind] = self.api.read_configuration(kind, name)
                continue
            metrics.CERT_STEPS.labels(step="webhooks", result="success").inc()
            logs.server_logger().info("self-managed certificates: webhooks written",
                                      extra={"configuration": f"{kind}/{name}", "serial": self.state.serial})

    def write_files(self) -> bool:
        """Put the Secret's serving pair into this replica's directory; True when it changed."""
        serving = self.state.serving
        if serving is None:
            return False
        pem = cert_pem(serving.cert)
        if pem == self.written:
            return False
        atomic_write(self.key_path, key_pem(serving.key), 0o600)  # key first: the cert must find its key
        atomic_write(self.cert_path, pem, 0o644)
        self.written = pem
        return True

    def _readiness(self, live: _Live) -> str | None:
        serving = self.state.serving
        if serving is None or self.served is None:
            return "no serving certificate loaded yet"
        trusted = self._trusted(live)
        issuers = [c for c in self.state.bundle() if sm.fingerprint(c) in trusted]
        served = x509.load_pem_x509_certificate(self.served)
        if not any(sm.issued_by(served, ca) for ca in issuers):
            return "the webhook configurations do not trust this replica's serving certificate yet"
        return None

    # -- passes -----------------------------------------------------------------------------

    def reconcile(self, now: dt.datetime | None = None, write_webhooks: bool = True) -> None:
        """One pass; raises ``CertSetupError`` or the API's error.  After a step the Secret is read
        again (a few times at most), so that a pass ends on what is stored."""
        for _ in range(3):
            live = self._read()
            if not self._step(live, now or dt.datetime.now(dt.UTC)):
                break
        else:
            return
        if write_webhooks:
            self._write_webhooks(live)
            self._last_live = live
            self.ready_reason = self._readiness(live)
        self.write_files()

    def loaded(self, served: bytes | None) -> None:
        """The TLS context now serves ``served``: readiness follows at once."""
        self.served = served
        if self._last_live is not None:
            self.ready_reason = self._readiness(self._last_live)

    def bootstrap(self) -> tuple[str, str]:
        """Before the server listens: make sure the Secret has a serving pair and write it here.

        Webhooks are not written yet (nothing listens to answer them); a fresh install's ``create``
        needs none.  Raises ``CertSetupError`` when no pair comes within a few passes.
        """
        for _ in range(BOOTSTRAP_PASSES):
            try:
                self.reconcile(write_webhooks=False)
            except self.api.error as exc:
                raise CertSetupError(_describe(exc, self.opts)) from None
            if self.written is not None:
                self.served = self.written
                return self.cert_path, self.key_path
            time.sleep(0.2)
        raise CertSetupError(f"Secret {self.opts.namespace}/{self.opts.secret} holds no usable serving "
                             "certificate yet (a CA rotation is waiting for the webhooks to trust the new CA, "
                             "or its content is broken: see the log; deleting the Secret's data starts over)")

    def problems(self) -> list[str]:
        return [self.ready_reason] if self.ready_reason else []

    async def run(self, reload: Callable[[], Awaitable[None]], served: Callable[[], bytes | None]) -> None:
        """Reconcile every ``interval`` seconds; reload TLS when the files changed.  Never raises."""
        log = logs.server_logger()
        while True:
            try:
                before = self.written
                await asyncio.to_thread(self.reconcile)
                if self.written != before:
                    await reload()  # checks the pair first; on a refusal the old one stays served
                    self.loaded(served())
                self.last_error = None
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an API outage must not kill the loop (the old cert keeps serving)
                self.last_error = str(exc) if isinstance(exc, CertSetupError) else _describe(exc, self.opts)
                metrics.CERT_STEPS.labels(step="pass", result="error").inc()
                log.error("self-managed certificates: pass failed", extra={"error": self.last_error})
            await asyncio.sleep(self.opts.interval)


def _describe(exc: Any, opts: Options) -> str:
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return (f"not allowed (HTTP {status}): the server needs get/update on Secret {opts.namespace}/{opts.secret}, "
                f"get on ConfigMap {opts.webhooks_configmap} and get/update on its two webhook configurations "
                "(deploy/overlays/self-managed)")
    if status is not None:
        return f"Kubernetes API answered HTTP {status} {getattr(exc, 'reason', '')}".rstrip()
    return f"{type(exc).__name__}: {exc}"
