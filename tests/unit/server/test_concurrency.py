"""No review waits behind another: the engine runs off the event loop, within a deadline.

A review whose engine call is held (an engine that blocks until the test lets it go) stands for
a slow one; the tests assert what is answered, and in which order, never how fast.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
import pytest

from tests.support.asgi_client import AsgiClient, make_app
from tests.support.server import gpu_job, review

CONFIG = ("apiVersion: gpuguard.io/v1alpha1\nkind: GpuguardConfig\nfailureMode: {mode}\n"
          "reviewDeadlineSeconds: {deadline}\n")


class _HeldEngine:
    """The real engine, except for objects named ``slow``: those wait until ``release`` is set."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:  # what the server reads of an engine (its node inventory)
        return getattr(self.engine, name)

    def evaluate(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        if obj.get("metadata", {}).get("name") == "slow":
            self.entered.set()
            self.release.wait(60)  # a safety net: the test releases it
        return self.engine.evaluate(obj, *args, **kwargs)


def _client(mode: str = "closed", deadline: float = 8) -> tuple[AsgiClient, _HeldEngine]:
    app = make_app(CONFIG.format(mode=mode, deadline=deadline))
    server = app.state.server
    held = _HeldEngine(server.active.engine)
    server.active = type(server.active)(server.active.config, held)
    return AsgiClient(app), held


def _named(name: str) -> dict:
    job = gpu_job()
    job["metadata"]["name"] = name
    return job


async def _post(client: AsgiClient, path: str, payload: Any = None) -> tuple[int, Any]:
    body = orjson.dumps(payload) if payload is not None else b""
    status, _, out = await client._call("POST" if payload is not None else "GET", path, body,
                                        {"content-type": "application/json"})
    return status, orjson.loads(out)


@pytest.mark.parametrize(("mode", "allowed"), [("closed", False), ("open", True)])
def test_a_review_past_its_deadline_is_answered_as_not_judged(mode, allowed):
    client, held = _client(mode, deadline=0.2)
    try:
        sent = review(_named("slow"))
        status, answer = client.post_json("/validate", sent)
    finally:
        held.release.set()
        client.close()
    response = answer["response"]
    assert status == 200 and response["uid"] == sent["request"]["uid"] and response["allowed"] is allowed
    said = response["warnings"][0] if allowed else response["status"]["message"]
    assert "not judged within the review deadline of 0.2 s (reviewDeadlineSeconds)" in said


def test_probes_and_other_reviews_are_answered_while_a_slow_review_runs():
    client, held = _client()
    order: list[str] = []

    async def scenario() -> tuple[Any, Any, Any]:
        async def tracked(name: str, path: str, payload: Any = None) -> tuple[int, Any]:
            result = await _post(client, path, payload)
            order.append(name)
            return result

        slow = asyncio.ensure_future(tracked("slow", "/mutate", review(_named("slow"))))
        while not held.entered.is_set():  # the slow review is inside the engine
            await asyncio.sleep(0.005)
        ready = await tracked("readyz", "/readyz")
        # another requester's review (one requester's reviews wait for each other: fair queuing, fairness.py)
        normal = review(_named("normal"))
        normal["request"]["userInfo"]["username"] = "bob@example.com"
        other = await tracked("other", "/mutate", normal)
        assert not slow.done()
        held.release.set()
        return ready, other, await slow

    try:
        ready, other, slow = client.loop.run_until_complete(scenario())
    finally:
        held.release.set()
        client.close()
    assert order == ["readyz", "other", "slow"]
    assert ready == (200, {"status": "ready"})
    assert other[0] == 200 and other[1]["response"]["allowed"] is True and "patch" in other[1]["response"]
    assert slow[0] == 200 and slow[1]["response"]["allowed"] is True and "patch" in slow[1]["response"]


def test_the_deadline_is_a_config_setting_below_the_webhook_timeout():
    from gpuguard.webhook.config import parse_config_text
    from gpuguard.webhook.config.errors import ConfigError

    with pytest.raises(ConfigError):
        parse_config_text(CONFIG.format(mode="closed", deadline=0), "t")
    assert parse_config_text(CONFIG.format(mode="closed", deadline=5), "t").raw.review_deadline_seconds == 5


def test_a_large_body_is_parsed_off_the_event_loop_with_the_same_answers():
    from gpuguard.webhook.server.review import PARSE_INLINE_BYTES

    client, held = _client()
    try:
        big = _named("normal")
        big["metadata"]["annotations"] = {"filler": "x" * PARSE_INLINE_BYTES}
        status, answer = client.post_json("/mutate", review(big))
        broken = orjson.dumps(review(big))[:-1]  # cut short: not JSON
        bad_status, _, bad = client.request("POST", "/mutate", broken, {"content-type": "application/json"})
    finally:
        held.release.set()
        client.close()
    assert status == 200 and answer["response"]["allowed"] is True and "patch" in answer["response"]
    assert bad_status == 400 and b"error" in bad
