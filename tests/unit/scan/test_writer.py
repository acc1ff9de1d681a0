"""The scan's report writer against a scripted apiserver: failed writes come back soon, refusals do not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuguard.webhook.scan.report import API_VERSION, Built
from gpuguard.webhook.scan.writer import Writer
from tests.support.fake_apiserver import Call, FakeApiserver, serve, status

BASE = "/apis/" + API_VERSION + "/namespaces/ml/policyreports"
LATER = float("inf")  # a "now" after every pending retry is due


class Reports:
    """Policy reports of namespace ``ml``, with the next write answers scripted in ``failures``."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.failures: list[int] = []
        self.version = 0

    def __call__(self, call: Call) -> tuple[int, Any]:
        if call.method != "GET" and self.failures:
            code = self.failures.pop(0)
            return code, status(code, {409: "Conflict", 422: "Invalid", 429: "TooManyRequests"}.get(code, "Error"))
        if call.method == "GET" and call.path.startswith(f"/apis/{API_VERSION}/") and "/namespaces/" not in call.path:
            mine = call.path.endswith("/policyreports")  # the cluster-wide lists ``Writer.load`` pages through
            return 200, {"items": list(self.stored.values()) if mine else [], "metadata": {}}
        name = call.path.rsplit("/", 1)[1] if call.path != BASE else None
        if call.method == "POST":
            if call.body["metadata"]["name"] in self.stored:
                return 409, status(409, "AlreadyExists")
            return self._store(call.body)
        if name not in self.stored:
            return 404, status(404, "NotFound")
        if call.method == "GET":
            return 200, self.stored[name]
        if call.method == "PUT":
            return self._store(call.body)
        del self.stored[name]
        return 200, status(200, "Success")

    def _store(self, body: dict[str, Any]) -> tuple[int, Any]:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.stored[body["metadata"]["name"]] = body
        return 201, body


def _built(name: str = "job-train", digest: str = "d1") -> Built:
    report = {"apiVersion": API_VERSION, "kind": "PolicyReport",
              "metadata": {"name": name, "namespace": "ml", "labels": {}, "annotations": {}},
              "results": [], "summary": {"fail": 1}}
    return Built(report, digest)


@pytest.fixture
def cluster() -> Iterator[tuple[Reports, FakeApiserver, Writer]]:
    reports = Reports()
    with serve(reports) as (server, api):
        yield reports, server, Writer(api, qps=1000, burst=1000, timeout=2.0)


def _writes(server: FakeApiserver) -> int:
    return sum(1 for c in server.calls if c.method != "GET")


@pytest.mark.parametrize("code", [500, 503, 429, 409])
def test_a_write_failing_twice_lands_on_the_retries_with_growing_waits(cluster, code: int) -> None:
    reports, server, writer = cluster
    assert writer.put(_built()) == "create"
    reports.failures = [code] * (4 if code == 409 else 2)  # a conflict is re-read and put once more first
    # The wait is drawn when the write fails, somewhere between ``started`` and ``ended``: bracketing it
    # keeps the check exact however long the requests take on a busy machine.
    started = time.monotonic()
    assert writer.put(_built(digest="d2")) == "retry"
    ended = time.monotonic()
    first = writer.pending[("ml", "job-train")]
    assert first.failures == 1 and started + 0.5 <= first.due <= ended + 1.0  # 1 s, jittered down to half of it
    assert writer.retry_due(now=started) == 0  # not due yet: nothing written
    assert len(reports.failures) == (2 if code == 409 else 1)
    again = time.monotonic()
    assert writer.retry_due(now=first.due) == 1
    ended = time.monotonic()
    second = writer.pending[("ml", "job-train")]
    assert second.failures == 2 and again + 1.0 <= second.due <= ended + 2.0  # 2 s, jittered down to half of it
    assert writer.retry_due(now=second.due) == 1
    assert reports.stored["job-train"]["metadata"]["name"] == "job-train" and not writer.pending
    assert writer.writes["update"] == 1 and writer.retries == 2  # landed without waiting for a resync


def test_waits_double_up_to_the_cap_and_a_success_starts_again_from_the_first(cluster) -> None:
    reports, _, writer = cluster
    reports.failures = [503] * 12
    started = time.monotonic()
    writer.put(_built())
    ended = time.monotonic()
    waits = []  # (shortest, longest) each wait can have been: it was drawn between started and ended
    for _ in range(11):
        retry = writer.pending[("ml", "job-train")]
        waits.append((retry.due - ended, retry.due - started))
        started = time.monotonic()
        writer.retry_due(now=LATER)
        ended = time.monotonic()
    assert all(shortest <= 60.0 for shortest, _ in waits)  # capped at 60 s,
    assert max(longest for _, longest in waits) >= 30.0  # half of it at least
    assert writer.pending[("ml", "job-train")].failures == 12
    writer.retry_due(now=LATER)
    assert not writer.pending and writer.writes["create"] == 1
    reports.failures = [503]
    writer.put(_built(digest="d2"))
    assert writer.pending[("ml", "job-train")].failures == 1  # a new streak


def test_a_timeout_is_retried_like_a_5xx(cluster) -> None:
    reports, server, writer = cluster
    writer.timeout = 0.2
    server.delay = 0.5
    assert writer.put(_built()) == "retry"
    server.delay = 0.0
    assert writer.retry_due(now=LATER) == 1
    assert writer.writes["create"] == 1 and not writer.pending


@pytest.mark.parametrize("code", [422, 403, 400])
def test_a_refusal_that_retrying_cannot_change_is_logged_once_and_left_to_the_resync(
        cluster, code: int, caplog: pytest.LogCaptureFixture) -> None:
    reports, server, writer = cluster
    reports.failures = [code] * 3
    assert writer.put(_built()) == "refused"
    assert not writer.pending and writer.retry_due(now=LATER) == 0
    assert _writes(server) == 1  # no loop: the next try is the resync's
    assert writer.put(_built()) == "refused"  # the resync tries again; the log does not repeat itself
    assert sum("refused" in r.getMessage() for r in caplog.records) == 1
    assert writer.put(_built()) == "refused"
    assert writer.put(_built()) == "create"  # what the apiserver accepts later is written


def test_a_namespace_being_deleted_is_not_retried(cluster) -> None:
    reports, server, writer = cluster
    reports.failures = [404]
    assert writer.put(_built()) == "gone" and not writer.pending


def test_a_failed_delete_is_retried_and_a_newer_write_replaces_the_pending_one(cluster) -> None:
    reports, server, writer = cluster
    writer.put(_built())
    reports.failures = [503]
    writer.delete(("ml", "job-train"))
    assert writer.pending[("ml", "job-train")].built is None
    assert writer.retry_due(now=LATER) == 1
    assert "job-train" not in reports.stored and not writer.pending and writer.writes["delete"] == 1
    # a create failing, then its workload deleted before the retry: nothing is created afterwards
    reports.failures = [503]
    writer.put(_built(name="other"))
    writer.delete(("ml", "other"))
    assert not writer.pending and writer.retry_due(now=LATER) == 0 and "other" not in reports.stored


def test_retries_pass_the_write_rate_limit(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    reports, _, writer = cluster
    taken = []
    monkeypatch.setattr(writer.bucket, "take", lambda: taken.append(1))
    reports.failures = [503, 503]
    writer.put(_built())
    writer.retry_due(now=LATER)
    writer.retry_due(now=LATER)
    assert len(taken) == 3 and writer.writes["create"] == 1


def test_the_leading_scanner_retries_due_writes_and_counts_them_in_the_metrics() -> None:
    from prometheus_client import REGISTRY

    from gpuguard.webhook.scan.scanner import Scanner, Settings

    def retries() -> float:
        return REGISTRY.get_sample_value("gpuguard_scan_report_write_retries_total") or 0.0

    reports = Reports()
    with serve(reports) as (_, api):
        scanner = Scanner(api, Settings())
        scanner.writer = Writer(api, qps=1000, burst=1000, retry_first=0.0)  # every retry due at once
        scanner.reports_served = True
        reports.failures = [503]
        assert scanner.writer.put(_built()) == "retry"
        before = retries()
        scanner._retry_writes()  # a stand-by leaves it to whoever leads
        assert "job-train" not in reports.stored and retries() == before
        scanner.lease.leading = True
        scanner._retry_writes()
    assert "job-train" in reports.stored and retries() == before + 1
    assert REGISTRY.get_sample_value("gpuguard_scan_report_writes_pending_retry") == 0


def _real(name: str = "job-train", fail: int = 1) -> Built:
    """A report with its content digest, as ``report.build`` makes them."""
    from gpuguard.webhook.scan.report import DIGEST_ANNOTATION, digest_of

    report = {"apiVersion": API_VERSION, "kind": "PolicyReport",
              "metadata": {"name": name, "namespace": "ml", "labels": {}, "annotations": {}},
              "results": [{"policy": "checkpoint-volume", "result": "fail"}] * fail, "summary": {"fail": fail}}
    report["metadata"]["annotations"][DIGEST_ANNOTATION] = digest_of(report)
    return Built(report, digest_of(report))


def test_a_new_leader_trusts_what_a_report_says_not_its_annotation(cluster) -> None:
    """A tenant who empties a report's results but keeps its digest annotation doesn't keep it so."""
    reports, _, writer = cluster
    built = _real()
    assert writer.put(built) == "create"
    reports.stored["job-train"]["results"], reports.stored["job-train"]["summary"] = [], {"pass": 1}  # forged
    leader = Writer(writer.api, qps=1000, burst=1000)
    leader.load()
    assert leader.put(built) == "update"
    assert reports.stored["job-train"]["results"] == built.report["results"]
    assert leader.put(built) == "unchanged"  # and then left alone


def test_observe_restores_what_someone_else_edited_or_deleted_and_ignores_its_own_writes(cluster) -> None:
    reports, _, writer = cluster
    built = _real()
    writer.put(built)
    key, own = ("ml", "job-train"), reports.stored["job-train"]["metadata"]["resourceVersion"]
    assert not writer.observe("MODIFIED", key, own, built.digest)  # its own write coming back
    assert not writer.observe("MODIFIED", ("ml", "unknown"), "9", "x")  # not one of its reports
    assert not writer.observe("MODIFIED", key, "50", built.digest)  # a label or annotation touched: same verdict
    assert writer.put(built) == "unchanged"
    assert writer.observe("MODIFIED", key, "51", _real(fail=0).digest)  # the results edited
    assert writer.put(built) == "update"
    del reports.stored["job-train"]
    assert writer.observe("DELETED", key, "52", "")
    assert writer.put(built) == "create" and "job-train" in reports.stored


def test_the_leading_scanner_rejudges_the_workload_whose_report_was_edited() -> None:
    from gpuguard.webhook.scan.scanner import Scanner, Settings

    reports = Reports()
    with serve(reports) as (_, api):
        scanner = Scanner(api, Settings())
        scanner.writer = Writer(api, qps=1000, burst=1000)
        scanner.reports_served = True
        built = _real()
        scanner.writer.put(built)
        workload = ("batch", "Job", "ml", "train")
        scanner.reports[workload] = ("ml", "job-train")
        forged = {**built.report, "results": [], "summary": {"pass": 1},
                  "metadata": {**built.report["metadata"], "resourceVersion": "77"}}
        scanner._report_event("MODIFIED", forged)
        scanner._restore_reports()  # a stand-by leaves it: whoever leads next digests every report on load
        assert scanner.index.pending() == 0 and scanner.restored == 0
        scanner._report_event("MODIFIED", forged)
        scanner.lease.leading = True
        scanner._restore_reports()
        assert workload in scanner.index.dirty and scanner.restored == 1
        assert scanner.writer.put(built) == "update"


def test_a_writer_that_knows_no_report_leaves_one_already_saying_the_same(cluster) -> None:
    """A create refused as existing reads the report: alike, it is left as it is and known from then on."""
    reports, server, writer = cluster
    built = _real()
    assert writer.put(built) == "create"
    version = reports.stored["job-train"]["metadata"]["resourceVersion"]
    fresh = Writer(writer.api, qps=1000, burst=1000)  # never loaded: knows nothing
    assert fresh.put(built) == "unchanged"
    assert reports.stored["job-train"]["metadata"]["resourceVersion"] == version
    assert fresh.put(_real(fail=2)) == "update"  # and one that says something else is replaced


def test_a_scanner_seeing_itself_lead_before_the_election_signal_reads_the_reports_first() -> None:
    """The lease thread sets ``leading`` before it signals: the scan thread must not write from an empty
    writer in between (it would rewrite every report the last leader wrote)."""
    from gpuguard.webhook.scan.scanner import Scanner, Settings

    reports = Reports()
    with serve(reports) as (_, api):
        Writer(api, qps=1000, burst=1000).put(_real())  # what the last leader wrote
        scanner = Scanner(api, Settings())
        scanner.writer = Writer(api, qps=1000, burst=1000)
        assert not scanner._take_office() and scanner.writer.known == {}
        scanner.lease.leading = True  # the election's signal (``_elected``) not yet set
        assert scanner._take_office()
        assert ("ml", "job-train") in scanner.writer.known
        assert scanner.writer.put(_real()) == "unchanged"
        scanner.writer.known.clear()
        assert scanner._take_office() and scanner.writer.known == {}  # in office: read once per term
        scanner._elected.set()  # the signal arriving late reads them again: harmless
        assert scanner._take_office() and ("ml", "job-train") in scanner.writer.known
        scanner.lease.leading = False
        assert not scanner._take_office()
        scanner.writer.known.clear()
        scanner.lease.leading = True  # a new term
        assert scanner._take_office() and ("ml", "job-train") in scanner.writer.known
