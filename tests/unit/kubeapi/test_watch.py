"""The scan's paginated list against a scripted apiserver: an expired continue token lists again from the start."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuguard.kubeapi.client import ApiError
from gpuguard.kubeapi.watch import Gone, ResourceWatch
from gpuguard.webhook.scan.discovery import Collection
from gpuguard.webhook.scan.index import Index
from gpuguard.workloads.kinds import lookup
from tests.support.builders import bare_pod_spec, make
from tests.support.fake_apiserver import Call, serve, status

JOBS = Collection("batch", "v1", "Job", "jobs", lookup("batch/v1", "Job"))
PATH = "/apis/batch/v1/jobs"


def _job(name: str, gpus: int = 1) -> dict[str, Any]:
    job = copy.deepcopy(make("Job", bare_pod_spec(gpus), name=name))
    job["metadata"].update(uid=f"uid-{name}", resourceVersion="1")
    return job


class Jobs:
    """A Job collection listed in pages (the continue token is the offset); ``expire`` lists the offsets whose
    page answers 410 Gone once, and ``on_expire`` changes the collection at that moment."""

    def __init__(self, names: list[str]) -> None:
        self.items = [_job(n) for n in names]
        self.expire: list[int] = []
        self.on_expire: Any = None

    def __call__(self, call: Call) -> tuple[int, Any]:
        limit, start = int(call.query["limit"]), int(call.query.get("continue", "0"))
        if call.query.get("continue") is not None and start in self.expire:
            self.expire.remove(start)
            if self.on_expire:
                self.on_expire(self)
            return 410, status(410, "Expired", "The provided continue parameter is too old")
        meta: dict[str, Any] = {"resourceVersion": "42"}
        if start + limit < len(self.items):
            meta["continue"] = str(start + limit)
        return 200, {"kind": "JobList", "apiVersion": "batch/v1", "metadata": meta,
                     "items": copy.deepcopy(self.items[start:start + limit])}


def _listing(jobs: Jobs, index: Index) -> tuple[Any, ...]:
    syncs: list[set] = []

    def sync(seen: set) -> None:
        syncs.append(seen)
        index.workload_sync(JOBS, seen)

    return syncs, lambda kind, obj: index.workload_event(JOBS, kind, obj), sync


def test_an_expired_continue_token_lists_again_from_the_start_without_dropping_or_duplicating() -> None:
    jobs = Jobs([f"j{i}" for i in range(5)])
    jobs.expire = [2]  # the second page (page size 2) answers 410 once

    def meanwhile(jobs: Jobs) -> None:  # while the token expired: j0 (already listed) deleted, j5 created
        jobs.items = [j for j in jobs.items if j["metadata"]["name"] != "j0"] + [_job("j5")]

    jobs.on_expire = meanwhile
    index = Index()
    index.listed = {("batch", "Job")}
    index.workload_event(JOBS, "ADDED", _job("gone-before"))  # deleted while nobody watched
    index.take()
    syncs, on_event, on_sync = _listing(jobs, index)
    with serve(jobs) as (server, api):
        version = ResourceWatch(api, PATH, on_event, on_sync, page_size=2).list()
    assert version == "42"
    pages = [(c.query.get("continue"), c.query["limit"]) for c in server.calls]
    assert pages == [(None, "2"), ("2", "2"), (None, "2"), ("2", "2"), ("4", "2")]  # fresh, without the token
    expected = {("ml", f"j{i}") for i in range(1, 6)}
    assert syncs == [expected]  # one sync, of the complete second list only
    assert {k[2:] for k in index.entries} == expected  # j0 and gone-before dropped, none twice
    batch, removed, _ = index.take()
    assert sorted(k[3] for k, _ in batch) == ["j1", "j2", "j3", "j4", "j5"]  # each once
    assert sorted(k[3] for k in removed) == ["gone-before", "j0"]


def test_a_list_whose_token_keeps_expiring_gives_up_after_three_tries_without_syncing() -> None:
    jobs = Jobs(["a", "b", "c"])
    jobs.expire = [2, 2, 2]
    index = Index()
    syncs, on_event, on_sync = _listing(jobs, index)
    with serve(jobs) as (server, api):
        watch = ResourceWatch(api, PATH, on_event, on_sync, page_size=2)
        with pytest.raises(Gone):  # run() lists again; a half list never syncs (never drops workloads)
            watch.list()
    assert syncs == [] and not watch.synced and len(server.calls) == 6


def test_a_410_on_the_first_page_is_an_error_the_watch_backs_off_from() -> None:
    def handle(call: Call) -> tuple[int, Any]:
        return 410, status(410, "Gone")

    with serve(handle) as (_, api), pytest.raises(ApiError) as raised:
        ResourceWatch(api, PATH, lambda k, o: None, lambda s: None).list()
    assert raised.value.status == 410
