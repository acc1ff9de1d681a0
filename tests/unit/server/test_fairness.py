"""Fair queuing per requester (``gpuguard.webhook.server.fairness``): order, shares, refusals, bounded state.

The queue itself is driven directly on an event loop (deterministic: each step is awaited), then a real
``gpuguard serve`` is flooded by one requester while another's reviews are answered.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Iterator

import httpx
import orjson
import pytest

from gpuguard.webhook.server.fairness import COST_BYTES, FairQueue, Flow, Head, Refused, flow_of
from tests.support.server import Server, gpu_job, metric_value, review, serve

pytestmark = pytest.mark.timeout(600)


def _head(user: str, namespace: str = "team-a", cost: float = 1.0, uid: str = "u") -> Head:
    return Head(Flow(user, namespace), uid, cost)


def _raw(user: str, namespace: str, *, dry_run: bool = False, pad: int = 0) -> bytes:
    job = gpu_job()
    job["metadata"]["namespace"] = namespace
    if pad:
        job["metadata"]["annotations"] = {"example.com/blob": "x" * pad}
    body = review(job, dry_run=dry_run, uid="uid-" + user)
    body["request"]["userInfo"]["username"] = user
    return orjson.dumps(body)


# -- the requester, read from the body's head ------------------------------------------------------------------
def test_the_requester_uid_and_cost_come_from_the_head_of_the_body() -> None:
    head = flow_of(_raw("system:serviceaccount:team-a:trainer", "team-a"))
    assert head.flow == Flow("system:serviceaccount:team-a:trainer", "team-a")
    assert head.uid == "uid-system:serviceaccount:team-a:trainer"
    assert 1.0 < head.cost < 1.1


def test_a_heavy_dry_run_costs_more_than_a_light_create() -> None:
    light = flow_of(_raw("alice", "a")).cost
    heavy = flow_of(_raw("alice", "a", pad=3 * COST_BYTES)).cost
    heavy_dry = flow_of(_raw("alice", "a", dry_run=True, pad=3 * COST_BYTES)).cost
    assert heavy > 3 * light and heavy_dry == pytest.approx(2 * heavy, rel=0.01)


def test_the_objects_own_namespace_and_names_do_not_choose_the_flow() -> None:
    """The request's namespace is the one before userInfo; the object's metadata comes after it."""
    body = orjson.loads(_raw("bob", "team-b"))
    body["request"]["object"]["metadata"]["namespace"] = "elsewhere"
    body["request"]["object"]["metadata"]["annotations"] = {"x": '"userInfo": {"username": "mallory"}'}
    assert flow_of(orjson.dumps(body)).flow == Flow("bob", "team-b")


def test_escaped_and_missing_requesters_still_get_a_flow() -> None:
    escaped = flow_of(b'{"request":{"uid":"u\\"1","namespace":"n","userInfo":{"username":"a\\u00e9b"}}}')
    assert escaped.flow == Flow("a\u00e9b", "n") and escaped.uid == 'u"1'
    nothing = flow_of(b'{"request":{}}')
    assert nothing.flow == Flow("", "") and nothing.uid == ""


# -- the queue ----------------------------------------------------------------------------------------------------
async def _hold(queue: FairQueue, head: Head, order: list[str], release: asyncio.Event, size: int = 0,
                timeout: float = 30) -> None:
    async with queue.slot(head, size, timeout):
        order.append(head.flow.user)
        await release.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_flow_that_sent_one_review_goes_before_a_floods_backlog() -> None:
    async def scenario() -> list[str]:
        queue = FairQueue(slots=1, per_flow=1)
        order: list[str] = []
        gates = [asyncio.Event() for _ in range(7)]
        tasks = [asyncio.create_task(_hold(queue, _head("flood"), order, gates[i])) for i in range(6)]
        await _settle()
        tasks.append(asyncio.create_task(_hold(queue, _head("bob", "team-b"), order, gates[6])))
        await _settle()
        for gate in gates:  # free one slot at a time
            gate.set()
            await _settle()
        await asyncio.gather(*tasks)
        assert queue.flows == 0 and queue.running == 0 and queue.waiting == 0
        return order

    order = asyncio.run(scenario())
    assert order.index("bob") == 1, order  # right after the flood's running review, not after its backlog


def test_a_flood_holds_at_most_its_share_and_another_flow_gets_a_slot_at_once() -> None:
    async def scenario() -> None:
        queue = FairQueue(slots=4, per_flow=1)
        release = asyncio.Event()
        order: list[str] = []
        flood = [asyncio.create_task(_hold(queue, _head("flood"), order, release)) for _ in range(10)]
        await _settle()
        assert order == ["flood"] and queue.running == 1 and queue.waiting == 9
        bob = asyncio.create_task(_hold(queue, _head("bob", "team-b"), order, release))
        await _settle()
        assert order == ["flood", "bob"] and queue.running == 2
        release.set()
        await asyncio.gather(*flood, bob)
        assert len(order) == 11 and queue.flows == 0

    asyncio.run(scenario())


def test_costly_reviews_let_a_light_flow_go_first() -> None:
    """Two flows with backlogs: the one whose reviews cost less is served more often (start-time fair order)."""
    async def scenario() -> list[str]:
        queue = FairQueue(slots=1, per_flow=1)
        order: list[str] = []
        release = asyncio.Event()
        blocker = asyncio.create_task(_hold(queue, _head("first", "x"), order, release))
        await _settle()
        done = asyncio.Event()
        done.set()  # each review below ends as soon as its slot comes
        tasks = [asyncio.create_task(_hold(queue, _head("heavy", cost=4.0), order, done)) for _ in range(3)]
        tasks += [asyncio.create_task(_hold(queue, _head("light", "b", cost=1.0), order, done)) for _ in range(6)]
        await _settle()
        release.set()
        await asyncio.gather(blocker, *tasks)
        return order

    order = asyncio.run(scenario())
    # heavy's first review starts at once; its second only after light's four cheaper ones
    assert order[:3] == ["first", "heavy", "light"] and order.index("heavy", 2) > order.index("light") + 3, order


def test_past_its_queue_a_requester_is_refused_at_once_naming_the_limit() -> None:
    async def scenario() -> None:
        queue = FairQueue(slots=2, per_flow=1, max_queued=2, max_queued_bytes=10_000)
        release = asyncio.Event()
        order: list[str] = []
        held = [asyncio.create_task(_hold(queue, _head("flood"), order, release)) for _ in range(3)]
        await _settle()
        with pytest.raises(Refused) as refused:
            await _hold(queue, _head("flood"), order, release)
        assert "2 reviews" in refused.value.reason and "--requester-queue 2" in refused.value.reason
        assert not refused.value.waited  # the server holds this one back before its 429 (review.py)
        assert "flood in namespace team-a" in refused.value.reason
        # bytes count too: bob has nothing waiting, but one body over the byte bound is refused
        with pytest.raises(Refused, match="--requester-queue-bytes"):
            bob_first = asyncio.create_task(_hold(queue, _head("bob", "b"), order, release))
            await _settle()
            await _hold(queue, _head("bob", "b"), order, release, size=20_000)
        release.set()
        await asyncio.gather(*held, bob_first)
        assert queue.flows == 0 and queue.running == 0

    asyncio.run(scenario())


def test_a_review_that_waits_past_its_bound_is_refused_and_leaves_nothing_behind() -> None:
    async def scenario() -> None:
        queue = FairQueue(slots=1, per_flow=1)
        release = asyncio.Event()
        order: list[str] = []
        holder = asyncio.create_task(_hold(queue, _head("slow"), order, release))
        await _settle()
        with pytest.raises(Refused, match="waited 0.05 s") as refused:
            await _hold(queue, _head("bob", "b"), order, release, timeout=0.05)
        assert refused.value.waited  # it waited already: answered at once
        assert queue.waiting == 0 and queue.flows == 1
        release.set()
        await holder
        assert queue.flows == 0 and queue.running == 0

    asyncio.run(scenario())


def test_a_cancelled_review_gives_its_slot_to_the_next() -> None:
    async def scenario() -> list[str]:
        queue = FairQueue(slots=1, per_flow=1)
        order: list[str] = []
        release = asyncio.Event()
        holder = asyncio.create_task(_hold(queue, _head("a"), order, release))
        await _settle()
        gone = asyncio.create_task(_hold(queue, _head("b", "b"), order, release))
        after = asyncio.create_task(_hold(queue, _head("c", "c"), order, release))
        await _settle()
        gone.cancel()  # the client left while it waited
        release.set()
        await asyncio.gather(holder, after)
        assert queue.flows == 0 and queue.running == 0
        return order

    assert asyncio.run(scenario()) == ["a", "c"]


def test_state_follows_the_reviews_in_flight_not_the_requesters_seen() -> None:
    async def scenario() -> None:
        queue = FairQueue(slots=4, per_flow=1)
        for i in range(2000):
            async with queue.slot(_head(f"user-{i}", f"ns-{i}"), 100, 1):
                pass
        assert queue.flows == 0 and not queue._waiting

    asyncio.run(scenario())


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        FairQueue(slots=0, per_flow=1)


# -- through a real server ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serve(tmp_path_factory.mktemp("fair"), "--requester-queue", "1") as running:
        yield running


def test_a_flood_from_one_requester_is_refused_past_its_share_while_another_is_answered(server: Server) -> None:
    flood = _raw("system:serviceaccount:team-a:flood", "team-a", dry_run=True, pad=2 * 1024 * 1024)
    answers: list[dict] = []

    def post(client: httpx.Client, raw: bytes) -> dict:
        return client.post("/validate", content=raw, headers={"Content-Type": "application/json"}).json()

    def send() -> None:
        with httpx.Client(base_url=server.base, verify=ssl.create_default_context(cafile=str(server.ca)),
                          timeout=60) as client:
            for _ in range(3):
                answers.append(post(client, flood))

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    bob = [post(server.client, _raw("bob", "team-b"))["response"] for _ in range(5)]
    for thread in threads:
        thread.join()
    refused = [a["response"] for a in answers if not a["response"]["allowed"]
               and a["response"]["status"]["code"] == 429]
    assert refused, "24 parallel 2 MiB dry runs with a queue of 1: some must be refused"
    assert refused[0]["uid"] == "uid-system:serviceaccount:team-a:flood"
    assert "system:serviceaccount:team-a:flood in namespace team-a" in refused[0]["status"]["message"]
    assert "--requester-queue 1" in refused[0]["status"]["message"]
    assert all(r.get("status", {}).get("code") != 429 for r in bob), bob  # bob's own reviews are judged
    assert all(r["uid"] == "uid-bob" for r in bob)
    text = server.client.get("/metrics").text
    assert metric_value(text, "gpuguard_rejected_requests_total", {"endpoint": "validate", "code": "429"}) \
        >= len(refused)
