"""Fair queuing of reviews per requester: one tenant's flood can't delay another tenant's review.

Through a cluster every review comes from the apiserver's address, so connection caps can't tell tenants apart.
The requester is in the review itself (``request.userInfo.username`` and ``request.namespace``): a *flow* is one
requester in one namespace, as the apiserver's API Priority and Fairness keys its flows by user and namespace.

Each review takes a slot before its body is parsed and judged (parsing a 3 MiB body costs as much as judging it):

* at most ``slots`` reviews hold one at a time (the engine's threads), and one flow at most ``per_flow``;
* waiting reviews are served in start-time fair order (each flow's next review starts where its last one
  finished, in virtual time), so a flow that sends many or heavy reviews waits behind its own, never ahead of a
  flow that sent one.  A review's cost grows with its body (``COST_BYTES``) and doubles for a dry run, which
  stores nothing and so costs its sender nothing;
* a flow may keep ``max_queued`` reviews (and ``max_queued_bytes`` of bodies) waiting: past that it gets a
  refusal (429) that names the limit, instead of a timeout for everyone — held back a second by the server, body
  dropped, so a client looping on refusals can't make the server read bodies as fast as it refuses them; a review
  that waited past its bound in the queue is refused the same way at once.  Memory stays bounded by what waits,
  whatever a flow sends.

The requester is read from the raw body with a bounded scan (``flow_of``) before the body is parsed: the
apiserver writes ``uid``, ``namespace`` and ``userInfo`` before the object.  A client that writes to gpuguard
directly could name somebody else's flow; that only moves it in the queue — every decision is taken on the
parsed review.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson

from gpuguard.webhook.server.limits import DEFAULT_REQUESTER_QUEUE, DEFAULT_REQUESTER_QUEUE_BYTES

# A review's cost is one plus one per this many body bytes: a 3 MiB body costs 13 small ones.
COST_BYTES = 256 * 1024
DRY_RUN_FACTOR = 2.0

# The scan reads no further than this into a body for the uid, namespace and requester.
_HEAD = 64 * 1024
_STRING = rb'"((?:[^"\\]|\\.){0,512})"'
_UID = re.compile(rb'"uid"\s*:\s*' + _STRING)
_USER_INFO = re.compile(rb'"userInfo"\s*:\s*\{')
_USERNAME = re.compile(rb'"username"\s*:\s*' + _STRING)
_NAMESPACE = re.compile(rb'"namespace"\s*:\s*' + _STRING)
_DRY_RUN = re.compile(rb'"dryRun"\s*:\s*true')


@dataclass(frozen=True)
class Flow:
    """One requester in one namespace (the user or ServiceAccount name, and the request's namespace)."""

    user: str
    namespace: str = ""

    def __str__(self) -> str:
        return f"{self.user or 'an unnamed requester'} in namespace {self.namespace}" if self.namespace \
            else self.user or "an unnamed requester"


@dataclass(frozen=True)
class Head:
    """What the scan of a raw review found: enough to queue it, and to refuse it with its own uid."""

    flow: Flow
    uid: str
    cost: float


def _text(match: re.Match[bytes] | None) -> str:
    if match is None:
        return ""
    try:
        text = orjson.loads(b'"' + match.group(1) + b'"')
    except orjson.JSONDecodeError:  # a name no real requester has: its own (odd) flow
        return match.group(1).decode("latin-1")
    return text if isinstance(text, str) else ""


def flow_of(raw: bytes) -> Head:
    """The requester, uid and cost of a raw AdmissionReview, from its head (never a full parse).

    The request-level ``namespace`` is the first one before ``userInfo`` (the object, later, has its own); a body
    written in another order still gets a flow, at worst the shared unnamed one.
    """
    head = raw[:_HEAD]
    info = _USER_INFO.search(head)
    user = _text(_USERNAME.search(head, info.end())) if info else ""
    namespace = _text(_NAMESPACE.search(head, 0, info.start())) if info else ""
    dry_run = _DRY_RUN.search(raw, max(0, len(raw) - _HEAD)) is not None
    cost = (1.0 + len(raw) / COST_BYTES) * (DRY_RUN_FACTOR if dry_run else 1.0)
    return Head(Flow(user, namespace), _text(_UID.search(head)), cost)


class Refused(Exception):
    """A review the queue would not take, or that waited past its deadline: answered 429 at once."""

    def __init__(self, flow: Flow, reason: str, waited: bool = False) -> None:
        super().__init__(reason)
        self.flow, self.reason, self.waited = flow, reason, waited  # waited: it was queued, then timed out


@dataclass
class _FlowState:
    finish: float = 0.0  # virtual time at which the flow's last queued review finishes
    running: int = 0
    queued: int = 0
    queued_bytes: int = 0


@dataclass(order=True)
class _Waiter:
    start: float
    seq: int
    flow: Flow = field(compare=False)
    size: int = field(compare=False)
    granted: asyncio.Future[None] = field(compare=False)


class FairQueue:
    """Slots for reviews, handed out in fair order between flows (see the module's docstring).

    Everything runs on the event loop's thread: no lock is needed, and a flow's state is dropped as soon as
    nothing of it runs or waits, so memory follows the reviews in flight, not how many requesters there were.
    """

    def __init__(self, slots: int, per_flow: int, max_queued: int = DEFAULT_REQUESTER_QUEUE,
                 max_queued_bytes: int = DEFAULT_REQUESTER_QUEUE_BYTES) -> None:
        if slots < 1 or per_flow < 1 or max_queued < 0 or max_queued_bytes < 0:
            raise ValueError("slots and per_flow must be at least 1, the queue bounds at least 0")
        self.slots, self.per_flow = slots, min(per_flow, slots)
        self.max_queued, self.max_queued_bytes = max_queued, max_queued_bytes
        self.running = 0
        self._vtime = 0.0
        self._flows: dict[Flow, _FlowState] = {}
        self._waiting: list[_Waiter] = []  # a heap by start tag; cancelled waiters are skipped when popped
        self._seq = itertools.count()

    @property
    def flows(self) -> int:
        """Flows with a review running or waiting."""
        return len(self._flows)

    @property
    def waiting(self) -> int:
        return sum(state.queued for state in self._flows.values())

    @contextlib.asynccontextmanager
    async def slot(self, head: Head, size: int, timeout: float) -> AsyncIterator[None]:
        """Hold a slot for the review ``head`` (a body of ``size`` bytes) while the block runs.

        Raises :class:`Refused` when its flow already has its fill waiting, or when no slot came within
        ``timeout`` seconds.
        """
        await self._acquire(head, size, timeout)
        try:
            yield
        finally:
            self._release(head.flow)

    async def _acquire(self, head: Head, size: int, timeout: float) -> None:
        flow = head.flow
        state = self._flows.setdefault(flow, _FlowState())
        # After every release the free slots go to whatever waits and may run (``_dispatch``): a slot free now
        # means nothing that may run is waiting, so this review takes it without queueing.
        if self.running < self.slots and state.running < self.per_flow:
            state.finish = max(self._vtime, state.finish) + head.cost  # the flow's own pace; nobody else's clock
            self._grant(state)
            return
        if state.queued >= self.max_queued or state.queued_bytes + size > self.max_queued_bytes:
            queued, queued_bytes = state.queued, state.queued_bytes
            self._forget_if_idle(flow, state)
            raise Refused(flow, f"gpuguard already has {queued} reviews ({_mib(queued_bytes)}) from {flow} "
                                f"waiting, its limit (--requester-queue {self.max_queued}, --requester-queue-bytes "
                                f"{_mib(self.max_queued_bytes)}); retry when they are answered")
        start = max(self._vtime, state.finish)
        state.finish = start + head.cost
        waiter = _Waiter(start, next(self._seq), flow, size, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        state.queued += 1
        state.queued_bytes += size
        try:
            await asyncio.wait_for(asyncio.shield(waiter.granted), timeout)
        except TimeoutError:
            if not waiter.granted.done():
                waiter.granted.cancel()
                self._unqueue(waiter)
                raise Refused(flow, f"waited {timeout:g} s for gpuguard behind other reviews from {flow} (at most "
                                    f"{self.per_flow} of one requester are judged at a time); retry",
                              waited=True) from None
        except asyncio.CancelledError:  # the client left or the server stops: give back what was granted
            if waiter.granted.done() and not waiter.granted.cancelled():
                self._release(flow)
            else:
                waiter.granted.cancel()
                self._unqueue(waiter)
            raise

    def _grant(self, state: _FlowState) -> None:
        self.running += 1
        state.running += 1

    def _unqueue(self, waiter: _Waiter) -> None:
        state = self._flows[waiter.flow]
        state.queued -= 1
        state.queued_bytes -= waiter.size
        self._forget_if_idle(waiter.flow, state)

    def _forget_if_idle(self, flow: Flow, state: _FlowState) -> None:
        if not state.running and not state.queued:
            self._flows.pop(flow, None)

    def _release(self, flow: Flow) -> None:
        state = self._flows[flow]
        self.running -= 1
        state.running -= 1
        self._forget_if_idle(flow, state)
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to the waiting reviews with the earliest start tags whose flow is under its share."""
        held: list[_Waiter] = []  # flows at their share: kept for later, in order
        while self._waiting and self.running < self.slots:
            waiter = heapq.heappop(self._waiting)
            if waiter.granted.done():  # given up (timed out or cancelled) while waiting
                continue
            state = self._flows[waiter.flow]
            if state.running >= self.per_flow:
                held.append(waiter)
                continue
            state.queued -= 1
            state.queued_bytes -= waiter.size
            self._vtime = max(self._vtime, waiter.start)
            self._grant(state)
            waiter.granted.set_result(None)
        for waiter in held:
            heapq.heappush(self._waiting, waiter)


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
