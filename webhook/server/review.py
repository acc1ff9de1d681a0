"""Answering one AdmissionReview: body -> request -> engine -> response, per ``failureMode``.

Shape of a review: refuse what is not plain JSON, read the body under a size cap, parse it
with orjson and check its nesting depth, validate only the AdmissionReview envelope, refuse
invalid resource quantities, hand the object (a plain dict) to ``Engine.evaluate`` and turn
the Decision into an AdmissionReview response.  The engine's error path is for real bugs
only: everything a user can put in an object is either judged or refused with a reason, and
the apiserver never sees a 500 or a traceback from a review.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from gpuguard.webhook.config.schema import DEFAULT_REVIEW_DEADLINE_SECONDS
from gpuguard.webhook.decision import Decision, RequestContext
from gpuguard.webhook.engine import onepass
from gpuguard.webhook.objects import ApiLookup, reads_objects
from gpuguard.webhook.server import envelope, fairness, logs, metrics, scale
from gpuguard.webhook.server.envelope import AdmissionRequest, ReviewError
from gpuguard.webhook.server.fairness import FairQueue
from gpuguard.webhook.server.state import ServerState

_IDENTITY = ("", "identity")


@dataclass
class Outcome:
    """What one review did, for the log line and the metrics."""

    decision: str  # allowed | denied | error
    policies: list[str] = dataclasses.field(default_factory=list)
    mutated_by: list[str] = dataclasses.field(default_factory=list)
    patch_ops: int = 0
    skipped: str | None = None
    error: str | None = None


class ClientGone(Exception):
    """The client closed the connection before the whole body arrived: nobody to answer."""


def check_encoding(request: Request) -> None:
    """415 for a compressed body: the apiserver sends plain JSON, and gpuguard never inflates."""
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding not in _IDENTITY:
        raise ReviewError(415, f"Content-Encoding {encoding!r} is not supported; send the AdmissionReview "
                               "as plain JSON")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or ReviewError(413) past ``limit``; :class:`ClientGone` on disconnect.

    An oversized body is still drained (up to 4x the limit) before the 413 goes out: a client
    still writing when the server closes the connection sees a reset instead of the reason.
    """
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise ReviewError(400, "invalid Content-Length header")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size <= limit:
                chunks.append(chunk)
            elif size > 4 * limit:
                break
    except ClientDisconnect:
        raise ClientGone(f"client disconnected after {size} of {declared or 'unknown'} body bytes") from None
    if size > limit:
        raise ReviewError(413, f"request body of {declared or 'more than ' + str(size)} bytes exceeds the "
                               f"{limit}-byte limit (max body size)")
    return b"".join(chunks)


def context(req: AdmissionRequest, endpoint: str, labels: dict[str, str],
            objects: ApiLookup | None = None) -> RequestContext:
    return RequestContext(
        operation=req.operation,
        namespace=req.namespace,
        namespace_labels=labels,
        username=req.user_info.username,
        groups=req.user_info.groups,
        old_object=req.old_object if req.operation == "UPDATE" and isinstance(req.old_object, dict) else None,
        mutate=endpoint == "mutate",
        validate=endpoint == "validate",
        read_object=objects.cached if objects is not None else None,
        list_objects=objects.cached_list if objects is not None else None,
    )


def failure(server: ServerState, req: AdmissionRequest, reason: str,
            allowed: bool | None = None) -> tuple[dict[str, Any], Outcome]:
    """What could not be judged: refused (failureMode closed) or allowed (open), saying why.

    ``allowed`` is the engine's answer when it had one (it also lets trusted controllers'
    requests through); otherwise the config's failureMode and the requester decide.
    """
    what = req.kind.kind or "object"
    if allowed is None:
        allowed = server.failure_open() or server.active.config.controllers.is_controller(req.user_info.username)
    if allowed:
        why = "failureMode is open" if server.failure_open() else "it comes from a trusted controller"
        warning = f"gpuguard could not check this {what} ({reason}); allowed because {why}"
        return envelope.allow(req.uid, [warning]), Outcome("error", error=reason)
    message = f"gpuguard could not check this {what}: {reason} (denied: failureMode is closed)"
    return envelope.deny(req.uid, 500, "InternalError", message), Outcome("error", error=reason)


def skip_reason(endpoint: str, req: AdmissionRequest) -> str | None:
    """Why the engine need not look at this request (it is allowed at once), or ``None``."""
    if req.operation not in ("CREATE", "UPDATE"):
        return f"operation {req.operation}"
    if req.sub_resource == "scale" and endpoint == "validate" and scale.scalable_kind(req) is not None:
        return None
    if req.sub_resource:
        return f"subresource {req.sub_resource}"
    return None


async def _as_workload_update(server: ServerState, req: AdmissionRequest) -> AdmissionRequest:
    """A ``scale`` review becomes an UPDATE of the workload it scales (see ``gpuguard.webhook.server.scale``)."""
    kind = scale.scalable_kind(req)
    assert kind is not None
    path = await asyncio.to_thread(server.workloads.replicas_path, req, kind)
    parent = await asyncio.to_thread(server.workloads.read, req)
    return scale.as_workload_update(req, kind, parent, path)


async def _prefetch(server: ServerState, req: AdmissionRequest) -> None:
    """A TrainJob is judged with its runtime, an InferenceService with its ServingRuntime, a multi-pod workload
    with the claims its pods share: read them (cached) before the engine, off the event loop."""
    for obj in (req.object, req.old_object):
        if reads_objects(obj):
            await asyncio.to_thread(server.objects.prefetch, obj, req.namespace)


def answer(server: ServerState, endpoint: str, req: AdmissionRequest,
           labels: dict[str, str] | None = None) -> tuple[dict[str, Any], Outcome]:
    """Ask the engine about one review that reaches it (``skip_reason`` found nothing to skip) and answer it.

    Every decision about the object — exemptions, unknown kinds, invalid quantities, policies —
    is the engine's, the same for every shell; only envelope faults are the server's.
    """
    try:
        ctx = context(req, endpoint, labels or {}, server.objects)
        decision = _decision(server, endpoint, req, ctx)
    except Exception as exc:
        logs.server_logger().error("engine raised; answering per failureMode",
                                   extra={"uid": req.uid, **logs.exception_summary(exc)})
        return failure(server, req, f"internal error ({type(exc).__name__})")
    if decision.error:
        return failure(server, req, decision.error, decision.allowed)
    review = envelope.from_decision(req.uid, req.kind.kind, decision, with_patch=endpoint == "mutate")
    response = review["response"]
    patched = "patch" in response
    outcome = Outcome(
        "allowed" if response["allowed"] else "denied",
        policies=sorted({v.policy for v in decision.violations}),
        mutated_by=list(decision.mutated_by) if patched else [],
        patch_ops=len(decision.patch) if patched else 0,
        skipped=decision.skipped,
    )
    if not req.dry_run:  # dry runs leave no trace in the violation counters
        for v in decision.violations:
            metrics.VIOLATIONS.labels(policy=v.policy, action=v.verdict).inc()
    return review, outcome


def _decision(server: ServerState, endpoint: str, req: AdmissionRequest, ctx: RequestContext) -> Decision:
    """The engine's decision for one review; a create is evaluated once for both of its reviews.

    /mutate of a create runs the validating policies too and keeps their answer for the object it returns
    (``gpuguard.webhook.server.onepass``); /validate uses it when it receives that object for a request alike,
    else evaluates.  What
    names other objects (a runtime, shared claims) is read before validation only, so it is evaluated apart.
    """
    engine = server.active.engine
    judge = (server.active, engine.inventory)
    # The object comes straight from orjson and is never modified: no defensive copy needed.
    if server.one_pass is None or req.operation != "CREATE" or req.sub_resource:
        return engine.evaluate(req.object, ctx, plain_json=True)
    # A Pod's priority, which the apiserver derives from the class, is left out of what is compared unless a
    # custom rule (which may read anything) could judge it.
    derived = not getattr(server.active.config, "custom", None)
    if endpoint == "validate":
        kept = server.one_pass.take(ctx, req.object, judge, derived)
        metrics.create_validations("evaluated" if kept is None else "reused").inc()
        return kept if kept is not None else engine.evaluate(req.object, ctx, plain_json=True)
    if reads_objects(req.object):
        return engine.evaluate(req.object, ctx, plain_json=True)
    # Only a Pod comes back changed by the apiserver alone (its Priority admission): no other kind pays the lookup.
    if req.kind.kind == "Pod" and not req.kind.group and \
            (returned := server.one_pass.returned(ctx, req.object, judge, derived)) is not None:
        metrics.REINVOCATIONS.inc()  # reinvoked with what gpuguard returned: nothing to evaluate again
        return onepass.unchanged(returned, req.object)
    both = engine.evaluate(req.object, dataclasses.replace(ctx, validate=True), plain_json=True)
    if onepass.can_split(both):
        server.one_pass.keep(ctx, both.mutated, judge, onepass.validating_half(both), derived)
    return onepass.mutating_half(both)


async def _judge(server: ServerState, endpoint: str, req: AdmissionRequest,
                 pool: Executor | None = None) -> tuple[dict[str, Any], Outcome]:
    """Gather what the engine reads (namespace labels, a runtime, a scaled workload) off the event loop, then
    answer in ``pool`` (the engine's threads): the event loop stays free for probes and other reviews."""
    labels = await server.namespace_labels(req)
    if server.settings.reads_the_cluster and req.namespace and \
            server.objects.stale_list("", "ResourceQuota", req.namespace):
        # namespace-quota reads the namespace's quotas: listed at most once per TTL, off the event loop
        await asyncio.to_thread(server.objects.list_objects, "", "ResourceQuota", req.namespace)
    try:
        judged = await _as_workload_update(server, req) if req.sub_resource == "scale" else req
    except scale.ScaleError as exc:
        return failure(server, req, str(exc))
    if endpoint == "validate":  # what the judged object names: a scaled workload's too
        await _prefetch(server, judged)
    if pool is None:
        return answer(server, endpoint, judged, labels)
    return await asyncio.get_running_loop().run_in_executor(pool, answer, server, endpoint, judged, labels)


def review_deadline(server: ServerState) -> float:
    """The config's ``reviewDeadlineSeconds``: past it, a review is answered as not judged."""
    raw = getattr(server.active.config, "raw", None)
    deadline = getattr(raw, "review_deadline_seconds", None)
    return deadline if isinstance(deadline, (int, float)) and deadline > 0 else DEFAULT_REVIEW_DEADLINE_SECONDS


async def _judge_in_time(server: ServerState, endpoint: str, req: AdmissionRequest,
                         pool: Executor | None, started: float | None = None) -> tuple[dict[str, Any], Outcome]:
    """:func:`_judge` within the review deadline counted from ``started`` (the body read: the time it waited
    for a slot is part of it), else answered as not judged (per failureMode).

    The engine thread of a review past its deadline runs on to its end (a thread can't be
    stopped; the engine's bounds keep that end near), but nobody waits for it.
    """
    deadline = review_deadline(server)
    spent = 0.0 if started is None else time.perf_counter() - started
    timer = asyncio.timeout(max(deadline - spent, 0.001))
    try:
        async with timer:
            return await _judge(server, endpoint, req, pool)
    except TimeoutError:
        if not timer.expired():
            raise
    logs.server_logger().warning("review deadline passed; answering per failureMode",
                                 extra={"uid": req.uid, "deadline_s": deadline})
    return failure(server, req, f"not judged within the review deadline of {deadline:g} s (reviewDeadlineSeconds)")


# Bodies larger than this are parsed in an engine thread too: parsing and validating a 3 MiB
# review takes tens of milliseconds, which the event loop (probes, other reviews) must not wait for.
PARSE_INLINE_BYTES = 64 * 1024


async def _parse(raw: bytes, pool: Executor | None) -> AdmissionRequest:
    if pool is None or len(raw) <= PARSE_INLINE_BYTES:
        return envelope.parse_review(raw)
    return await asyncio.get_running_loop().run_in_executor(pool, envelope.parse_review, raw)


def json_response(status: int, body: Any) -> Response:
    return Response(content=orjson.dumps(body), status_code=status, media_type="application/json")


def _refused(endpoint: str, status: int, reason: str) -> Response:
    metrics.REJECTED.labels(endpoint=endpoint, code=str(status)).inc()
    logs.server_logger().warning("bad admission request", extra={
        "endpoint": endpoint, "status": status, "reason": reason})
    return json_response(status, {"error": reason})


async def handle_review(request: Request, endpoint: str) -> Response:
    """The /mutate and /validate route: always an AdmissionReview or an ``{"error": …}`` answer.

    The body is read, then waits for a slot in its requester's fair queue (``fairness``) before it is parsed and
    judged: one tenant's flood of heavy reviews waits behind itself, and past its share is refused at once.
    """
    server: ServerState = request.app.state.server
    pool = getattr(request.app.state, "engine_pool", None)
    fair: FairQueue | None = getattr(request.app.state, "fair_queue", None)
    started = time.perf_counter()
    try:
        check_encoding(request)
        raw = await read_body(request, server.max_body_bytes())
    except ReviewError as exc:
        return _refused(endpoint, exc.status, exc.reason)
    except ClientGone as exc:
        metrics.REJECTED.labels(endpoint=endpoint, code="disconnect").inc()
        logs.server_logger().warning("client disconnected mid-request", extra={"endpoint": endpoint,
                                                                               "reason": str(exc)})
        return Response(status_code=400)  # never delivered: the connection is gone
    if fair is None:
        return await _review(server, endpoint, raw, pool, started)
    head = fairness.flow_of(raw)
    deadline = review_deadline(server)
    try:
        async with fair.slot(head, len(raw), deadline * QUEUE_SHARE_OF_DEADLINE):
            metrics.QUEUE_WAIT.observe(time.perf_counter() - started)
            return await _review(server, endpoint, raw, pool, started)
    except fairness.Refused as exc:
        refused = exc
    del raw  # not kept while the refusal is held back
    if not refused.waited:
        # Held back a moment, without a slot or the body: a client that resends at once (a loop of dry runs) would
        # otherwise make the server read its bodies as fast as it refuses them, and reading is what the others'
        # reviews wait behind (bench/fairness.py).
        await asyncio.sleep(REFUSAL_HOLD_SECONDS)
    return _over_share(endpoint, head, refused)


# At most this share of the review deadline is spent waiting for a slot; the rest is the judging's.
QUEUE_SHARE_OF_DEADLINE = 0.5
# How long a review refused because its requester's queue is full waits before its 429 goes out.
REFUSAL_HOLD_SECONDS = 1.0


def _over_share(endpoint: str, head: fairness.Head, refused: fairness.Refused) -> Response:
    """A review its requester's queue would not take: 429 in the AdmissionReview, so kubectl shows why."""
    metrics.REJECTED.labels(endpoint=endpoint, code="429").inc()
    logs.server_logger().warning("review refused: its requester is over its share", extra={
        "endpoint": endpoint, "uid": head.uid, "user": head.flow.user, "namespace": head.flow.namespace,
        "reason": refused.reason})
    review = envelope.deny(head.uid, 429, "TooManyRequests", refused.reason)
    return Response(content=orjson.dumps(review), media_type="application/json")


async def _review(server: ServerState, endpoint: str, raw: bytes, pool: Executor | None,
                  started: float) -> Response:
    """Parse, judge and answer one review body (within what is left of the review deadline)."""
    try:
        req = await _parse(raw, pool)
    except ReviewError as exc:
        return _refused(endpoint, exc.status, exc.reason)
    skip = skip_reason(endpoint, req)
    if skip is not None:
        review, outcome = envelope.allow(req.uid), Outcome("allowed", skipped=skip)
    else:
        try:
            review, outcome = await _judge_in_time(server, endpoint, req, pool, started)
        except Exception as exc:  # nothing a review holds may turn into a 500: refuse what could not be judged
            logs.server_logger().error("review failed; answering per failureMode",
                                       extra={"uid": req.uid, **logs.exception_summary(exc)})
            review, outcome = failure(server, req, f"internal error ({type(exc).__name__})")
    body = orjson.dumps(review)
    elapsed = time.perf_counter() - started
    metrics.review_duration(endpoint).observe(elapsed)
    metrics.requests_counted(endpoint, metrics.kind_label(req.kind.group, req.kind.version, req.kind.kind),
                             outcome.decision).inc()
    fields: dict[str, Any] = {
        "endpoint": endpoint, "uid": req.uid, "kind": req.kind.kind, "namespace": req.namespace,
        "name": req.object_name(), "operation": req.operation, "user": req.user_info.username,
        "decision": outcome.decision, "policies": outcome.policies, "mutated_by": outcome.mutated_by,
        "patch_ops": outcome.patch_ops, "latency_ms": round(elapsed * 1000, 3), "dry_run": req.dry_run,
    }
    if outcome.skipped:
        fields["skipped"] = outcome.skipped
    if outcome.error:
        fields["error"] = outcome.error
    logs.log_review(**fields)
    return Response(content=body, media_type="application/json")
