"""Prometheus metrics of the webhook server.

Label values are bounded on purpose: ``kind`` is one of the kinds in ``gpuguard.workloads.kinds`` or
``other`` (a wildcard webhook rule must not mint a series per CRD), ``policy`` is a policy id
from the config, ``decision`` is allowed|denied|error.

With ``--workers N > 1`` every worker is its own process with its own counters; the
Prometheus client then needs ``PROMETHEUS_MULTIPROC_DIR`` (an empty, writable directory
set *before* the server starts) and ``/metrics`` aggregates the per-process files.  Without
it each scrape would see one random worker's numbers.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from gpuguard.workloads import kinds

# The apiserver gives up on a webhook after timeoutSeconds (default 10, max 30): buckets must
# reach that far, or the slow tail that trips failurePolicy is invisible.
DURATION_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

REQUESTS = Counter(
    "gpuguard_admission_requests_total",
    "Admission reviews answered, by endpoint, workload kind and decision (allowed|denied|error).",
    ["endpoint", "kind", "decision"],
)
REJECTED = Counter(
    "gpuguard_rejected_requests_total",
    "Requests to /mutate or /validate answered without a review: 400 malformed, 413 too large, 415 "
    "compressed, 429 its requester over its share of the fair queue, or disconnect (the client left mid-body).",
    ["endpoint", "code"],
)
CONNECTIONS_REFUSED = Counter(
    "gpuguard_connections_closed_total",
    "Connections the server closed itself: over the connection cap or one client's cap, or a request not read in time.",
    ["reason"],
)
VIOLATIONS = Counter(
    "gpuguard_violations_total",
    "Policy violations found in admission reviews (dry-run requests are not counted), by verdict.",
    ["policy", "action"],
)
DURATION = Histogram(
    "gpuguard_admission_duration_seconds",
    "Time from request body received to response built, per endpoint.",
    ["endpoint"],
    buckets=DURATION_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "gpuguard_admission_queue_wait_seconds",
    "Time a review waited for a slot in its requester's fair queue (body read to slot), before it was parsed.",
    buckets=DURATION_BUCKETS,
)
ONE_PASS = Counter(
    "gpuguard_create_validations_total",
    "Validating reviews of creates: reused, the mutating review's one evaluation answered it (the object it "
    "returned, for a request alike); evaluated, judged in full (another replica, another webhook's change in "
    "between, or no mutating review here).",
    ["result"],
)
REINVOCATIONS = Counter(
    "gpuguard_create_mutations_unchanged_total",
    "Mutating reviews of creates that received an object gpuguard had just returned (the apiserver calls it again "
    "after its Priority admission set a Pod's priority from the class gpuguard named): answered unchanged, "
    "without evaluating again.",
)
CONFIG_RELOADS = Counter(
    "gpuguard_config_reloads_total",
    "Config file reloads after a change on disk; error means the old config stays in force.",
    ["result"],
)
CERT_RELOADS = Counter(
    "gpuguard_cert_reloads_total",
    "Serving certificate reloads after a change on disk; error means the old certificate stays.",
    ["result"],
)
CERT_EXPIRY = Gauge(
    "gpuguard_cert_expiry_timestamp_seconds",
    "notAfter of the serving certificate in use, as a Unix timestamp.",
    multiprocess_mode="mostrecent",
)
CERT_STEPS = Counter(
    "gpuguard_selfmanaged_cert_steps_total",
    "--self-managed-certs: steps written (create, renew, stage, mark, switch, retire, webhooks); conflict "
    "means another replica wrote first, error a pass that failed (the certificate in use stays).",
    ["step", "result"],
)

for _used in ("reused", "evaluated"):
    ONE_PASS.labels(result=_used)
for _result in ("success", "error"):
    CONFIG_RELOADS.labels(result=_result)
    CERT_RELOADS.labels(result=_result)


@functools.cache
def review_duration(endpoint: str) -> Any:
    """DURATION's child for an endpoint, looked up once: ``labels()`` takes a lock and builds a key per call, on
    every review (the endpoints are the server's two routes, so the cache is bounded)."""
    return DURATION.labels(endpoint=endpoint)


@functools.cache
def requests_counted(endpoint: str, kind: str, decision: str) -> Any:
    """REQUESTS' child, looked up once per label set (bounded: two endpoints, the known kinds and ``other``,
    three decisions)."""
    return REQUESTS.labels(endpoint=endpoint, kind=kind, decision=decision)


@functools.cache
def create_validations(result: str) -> Any:
    """ONE_PASS's child for ``reused`` or ``evaluated``."""
    return ONE_PASS.labels(result=result)


def kind_label(group: str, version: str, kind: str) -> str:
    """The request's kind when gpuguard knows it, else ``other`` (keeps cardinality bounded)."""
    api_version = f"{group}/{version}" if group else version
    return kind if kinds.lookup(api_version, kind) is not None else "other"


def render() -> tuple[bytes, str]:
    """The exposition text and its content type; aggregates worker files in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
