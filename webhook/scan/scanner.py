"""The scan loop: watches feed the index, one thread re-evaluates what changed and writes reports.

What marks a workload for a new decision: its own change (a status-only update does not), its
namespace's labels, a runtime it may read, the config file, the node inventory, and a periodic
resync (``resync`` seconds: the safety net for anything a watch missed, and the time a CRD
installed later is discovered).  Changes are debounced (``settle`` seconds) so a burst becomes one
batch.  The replica that holds the Lease evaluates and writes; the others keep their watches warm
and take over when the Lease expires.

Reports of workloads deleted while nobody led, or whose workload no longer needs one, are swept after
each full pass, and only once every watch has listed: a half-listed cluster never deletes reports.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from gpuguard.kubeapi import client as kubeapi
from gpuguard.kubeapi.watch import ResourceWatch
from gpuguard.webhook.cli.audit import cost
from gpuguard.webhook.cli.audit.cluster import strip_server_fields
from gpuguard.webhook.decision import RequestContext
from gpuguard.webhook.reportapi import REPORT_APIS
from gpuguard.webhook.scan import metrics
from gpuguard.webhook.scan.discovery import Collection, Discovery
from gpuguard.webhook.scan.index import CachedRuntimes, Index, WorkloadKey
from gpuguard.webhook.scan.judge import at_risk, judge, policy_ids, policy_titles
from gpuguard.webhook.scan.lease import Lease
from gpuguard.webhook.scan.report import LABEL_SELECTOR, Outcome, build, digest_of
from gpuguard.webhook.scan.writer import ReportKey, Writer
from gpuguard.workloads.inventory import Inventory

log = logging.getLogger("gpuguard.scan")
INVENTORY_WAIT = 30.0  # seconds the first pass waits for the node inventory


@dataclass
class Settings:
    """``gpuguard scan``'s flags."""

    config: str | None = None
    lease_namespace: str = "gpuguard"
    lease_name: str = "gpuguard-scan"
    identity: str = ""
    resync: float = 600.0
    settle: float = 1.0
    page_size: int = 500
    write_qps: float = 20.0
    write_burst: int = 50
    lease_duration: float = 15.0
    node_inventory: bool = True
    dra_claims: bool = False
    report_api: str = "policyreports"  # or "openreports" (gpuguard.webhook.reportapi.REPORT_APIS)
    extra: dict[str, Any] = field(default_factory=dict)


class Scanner:
    """One process's scan: watches, index, engine, lease and writer."""

    def __init__(self, api: Any, settings: Settings) -> None:
        from gpuguard.webhook.config import load_config
        from gpuguard.webhook.engine.core import Engine

        self.api, self.settings = api, settings
        self.index = Index()
        self.runtimes = CachedRuntimes(self.index)
        self.config = load_config(settings.config)
        self.engine = Engine(self.config)
        self.policies, self.titles = policy_ids(self.config), policy_titles(self.config)
        self.prices = cost.Prices.from_config(self.config)
        self._config_stamp = self._stamp()
        self._config_checked = 0.0
        self.inventory: Inventory | None = None
        self._new_inventory: Inventory | None = None
        identity = settings.identity or f"{os.uname().nodename}-{os.getpid()}"
        self.lease = Lease(api, settings.lease_namespace, settings.lease_name, identity,
                           duration=settings.lease_duration, renew_deadline=settings.lease_duration * 2 / 3)
        self.report_api = REPORT_APIS[settings.report_api]
        self.writer = Writer(api, settings.write_qps, settings.write_burst, report_api=self.report_api)
        self.watches: dict[tuple[str, str, str], ResourceWatch] = {}
        self.facts: dict[WorkloadKey, metrics.Facts] = {}
        self.reports: dict[WorkloadKey, ReportKey] = {}
        self.stop_event = threading.Event()
        self.full_passes = 0
        self.first_pass_seconds: float | None = None
        self._started = time.monotonic()
        self._full_due = True
        self._elected = threading.Event()
        self._in_office = False  # leading, with the last leader's reports read (``_take_office``)
        self.reports_served: bool | None = None
        self._published: dict[str, int] = {}
        # gpuguard's reports as the cluster holds them, newest event per report (bounded by the reports it
        # writes): the scan thread restores those someone else edited or deleted (``_restore_reports``)
        self._report_changes: dict[ReportKey, tuple[str, str, str]] = {}
        self._report_lock = threading.Lock()
        self._report_watches: list[ResourceWatch] = []
        self.restored = 0
        self.read_again = 0  # large workloads read again to be judged (``index.MAX_KEPT_BYTES``)

    # ------------------------------------------------------------------ watches
    def discover(self) -> None:
        """Start a watch for every served collection that has none yet."""
        discovery = Discovery(self.api)
        workloads, runtimes = discovery.collections()
        for note in discovery.notes:
            log.warning("%s", note)
        api = self.report_api
        served = discovery.serves(api.group, api.version, api.plural)
        if not served and self.reports_served is not False:
            log.warning("the cluster does not serve %s %ss (install the CRDs, docs/reports.md): metrics only until "
                        "a resync finds them", api.api_version, api.kind)
        if served and self.reports_served is False:
            self._full_due = True  # the CRDs arrived: write every report
        self.reports_served = served
        if served and not self._report_watches:
            self._report_watches = [
                ResourceWatch(self.api, path, self._report_event, lambda seen: None,
                              page_size=self.settings.page_size, label_selector=LABEL_SELECTOR,
                              name=f"{path.rsplit('/', 1)[-1]}.gpuguard").start()
                for path in api.everywhere()]
        metrics.REPORTS_SERVED.set(1 if served else 0)
        self.index.listed |= {(c.group, c.kind) for c in workloads}
        for c in workloads:
            self._watch(("w", c.group, c.kind), c, lambda kind, obj, c=c: self.index.workload_event(c, kind, obj),
                        lambda seen, c=c: self.index.workload_sync(c, seen))
        for c in runtimes:
            self._watch(("r", c.group, c.kind), c, lambda kind, obj, c=c: self.index.runtime_event(c, kind, obj),
                        lambda seen: None)
        self._watch(("n", "", "Namespace"), Collection("", "v1", "Namespace", "namespaces"),
                    self.index.namespace_event, lambda seen: None)

    def _report_event(self, kind: str, obj: dict) -> None:
        """One of gpuguard's reports changed in the cluster (the report watch's thread): keep its newest state."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        state = (kind, str(meta.get("resourceVersion") or ""), "" if kind == "DELETED" else digest_of(obj))
        with self._report_lock:
            self._report_changes[key] = state

    def _restore_reports(self) -> None:
        """Re-judge the workloads whose report someone else edited or deleted, so their next write restores it
        (the leader only; a new leader's ``load`` digests every report instead)."""
        with self._report_lock:
            changes, self._report_changes = self._report_changes, {}
        if not changes or not self.lease.leading or not self.reports_served:
            return
        owners = {report: workload for workload, report in self.reports.items()}
        restoring = 0
        for key, (kind, version, digest) in changes.items():
            if self.writer.observe(kind, key, version, digest) and key in owners:
                self.index.mark(owners[key])
                restoring += 1
        if restoring:
            self.restored += restoring
            metrics.REPORTS_RESTORED.inc(restoring)
            log.warning("restoring %d report(s) that someone else edited or deleted", restoring)

    def _watch(self, key: tuple[str, str, str], c: Collection, on_event: Any, on_sync: Any) -> None:
        if key in self.watches:
            return
        self.watches[key] = ResourceWatch(self.api, c.path, on_event, on_sync, page_size=self.settings.page_size,
                                          name=f"{c.kind.lower()}.{c.group or 'core'}").start()

    @property
    def synced(self) -> bool:
        """Every watch has listed, and the first node inventory is in (or ``INVENTORY_WAIT`` has passed: a
        scan that cannot list nodes judges as the webhook without an inventory rather than not at all).
        Judging before the inventory would write reports that the inventory then changes."""
        inventory_in = (not self.settings.node_inventory or self.inventory is not None
                        or time.monotonic() - self._started > INVENTORY_WAIT)
        return inventory_in and all(w.synced for w in self.watches.values())

    def _on_inventory(self, inventory: Inventory) -> None:
        self._new_inventory = inventory  # applied by the scan thread: the engine is not shared across threads

    # ------------------------------------------------------------------ changes the engine reads
    def _stamp(self) -> tuple[float, int] | None:
        if not self.settings.config:
            return None
        try:
            st = os.stat(self.settings.config)
        except OSError:
            return None
        return st.st_mtime, st.st_size

    def _check_config(self) -> None:
        now = time.monotonic()
        if now - self._config_checked < 2.0:
            return
        self._config_checked = now
        stamp = self._stamp()
        if stamp is None or stamp == self._config_stamp:
            return
        self._config_stamp = stamp
        from gpuguard.webhook.config import ConfigError, load_config
        from gpuguard.webhook.engine.core import Engine

        try:
            config = load_config(self.settings.config)
        except (ConfigError, OSError) as exc:
            metrics.CONFIG_RELOADS.labels(result="error").inc()
            log.error("config %s not reloaded, the old one stays: %s", self.settings.config, exc)
            return
        self.config, self.engine = config, Engine(config, nodes=self.inventory)
        self.policies, self.titles = policy_ids(config), policy_titles(config)
        self.prices = cost.Prices.from_config(config)
        metrics.CONFIG_RELOADS.labels(result="success").inc()
        log.info("config %s reloaded: every workload is judged again", self.settings.config)
        self._full_due = True

    def _apply_inventory(self) -> None:
        inventory, self._new_inventory = self._new_inventory, None
        if inventory is None or inventory == self.inventory:
            return
        self.inventory = inventory
        self.engine.set_nodes(inventory)
        log.info("node inventory changed (%d nodes): every workload is judged again", inventory.nodes)
        self._full_due = True

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        self.discover()
        if self.settings.node_inventory:
            from gpuguard.webhook.server.nodewatch import NodeWatch

            NodeWatch(self.api, self._on_inventory).start()
        if self.settings.dra_claims:  # claims change rarely: the resync re-judges what reads them
            from gpuguard.webhook.server.claimwatch import start_shared_watch

            start_shared_watch(self.api)
        threading.Thread(target=self._lead_loop, daemon=True, name="gpuguard-scan-lease").start()
        next_resync = 0.0
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now >= next_resync:
                if next_resync:
                    self.discover()
                    self._full_due = True
                next_resync = now + self.settings.resync
            self._check_config()
            self._apply_inventory()
            metrics.PENDING.set(self.index.pending())
            for watch in list(self.watches.values()):
                metrics.WATCH_FAILING.labels(watch.name).set(1 if watch.error else 0)
            for verb, count in list(kubeapi.REQUESTS.items()):
                metrics.API_REQUESTS.labels(verb).set(count)
            leading = self._take_office()
            self._restore_reports()
            self._retry_writes()
            if leading and self.synced and (self._full_due or self.index.pending()):
                self.stop_event.wait(self.settings.settle)  # debounce: a burst of changes is one batch
                self.process()
            else:
                self.index.changed.wait(0.5)

    def _lead_loop(self) -> None:
        """Acquire or renew the Lease every third of its duration, in its own thread: a long pass (the
        first one over a large cluster) must never let the lease lapse while this replica writes."""
        while not self.stop_event.is_set():
            was = self.lease.leading
            leading = self.lease.try_acquire_or_renew()
            metrics.LEADER.set(1 if leading else 0)
            if leading and not was:
                self._elected.set()
                self.index.changed.set()
            if was and not leading:
                metrics.publish((), leading=False)
            self.stop_event.wait(self.settings.lease_duration / 3)

    def _take_office(self) -> bool:
        """Whether this replica leads, having read what the last leader wrote.  The lease thread sets
        ``leading`` before it signals the election, so the scan thread can see the one without the other: it
        reads the reports itself on the first turn it sees itself leading.  A pass before that read would know
        no report and rewrite every one the last leader wrote (a stand-by's index holds every workload dirty)."""
        if not self.lease.leading:
            self._in_office = False
            return False
        if not self._in_office or self._elected.is_set():
            self._elected.clear()
            self._load_reports()
            self._in_office = True
        return True

    def _load_reports(self) -> None:
        """Just elected: read what the last leader wrote (unchanged reports are not rewritten), judge all."""
        try:
            self.writer.load()
        except Exception as exc:  # noqa: BLE001 - without it every report is rewritten once
            log.warning("listing existing reports failed (%s)", type(exc).__name__)
        self._full_due = True

    def process(self) -> None:
        """Judge the dirty workloads (all of them on a full pass), write their reports, update the metrics."""
        full, self._full_due = self._full_due, False
        if full:
            self.index.mark_all()
        started = time.monotonic()
        batch, removed, since = self.index.take()
        for key in removed:
            self.facts.pop(key, None)
            report = self.reports.pop(key, None)
            if report is not None and self.lease.leading and self.reports_served:  # else the next sweep does
                self.writer.delete(report)
        complete = True
        for key, entry in batch:
            if not self.lease.leading or self.stop_event.is_set():
                self.index.mark(key)  # lost the lease mid-batch, or stopping: whoever leads next judges it
                complete = False
                continue
            self._judge(key, entry)
        if not self.lease.leading:
            metrics.publish((), leading=False)
        if full and complete:
            unlisted = frozenset((key[1], key[2]) for key, watch in self.watches.items()
                                 if key[0] == "w" and watch.error)
            swept = self.writer.sweep(set(self.reports.values()), unlisted) if self.reports_served else 0
            self.full_passes += 1
            metrics.FULL_PASSES.inc()
            if self.first_pass_seconds is None:
                self.first_pass_seconds = time.monotonic() - self._started
                log.info("first full pass: %d workloads, %d reports, %.1f s after start", len(batch),
                         len(self.reports), self.first_pass_seconds)
            if swept:
                log.info("removed %d reports whose workloads are gone", swept)
        elapsed = time.monotonic() - started
        metrics.PASS_DURATION.labels("full" if full else "changes").observe(elapsed)
        if since is not None:
            metrics.LAG.set(time.monotonic() - since)
        metrics.WORKLOADS.set(len(self.index.entries))
        metrics.REPORTS.set(len(self.reports))
        self._publish_writes()
        metrics.publish(list(self.facts.values()), self.lease.leading)

    def _retry_writes(self) -> None:
        """Try again the report writes that failed and whose wait is over (the leader only: a stand-by
        writes nothing, and a new leader's full pass writes whatever is still wanted)."""
        if self.lease.leading and self.reports_served and self.writer.retry_due():
            self._publish_writes()

    def _publish_writes(self) -> None:
        """The writer's counts (writes, retries) since the last call, onto the metrics."""
        counts = {**self.writer.writes, "retries": self.writer.retries}
        for op in ("create", "update", "delete"):
            metrics.WRITES.labels(operation=op).inc(counts[op] - self._published.get(op, 0))
        metrics.WRITE_RETRIES.inc(counts["retries"] - self._published.get("retries", 0))
        self._published.update(counts)
        metrics.RETRIES_PENDING.set(len(self.writer.pending))

    def _read_again(self, entry: Any) -> dict | None:
        """A workload kept as its digest only (past ``index.MAX_KEPT_BYTES``), read again to be judged and let go;
        ``None`` when it is gone or can't be read now (its next event, or the next resync, judges it)."""
        try:
            raw = orjson.loads(kubeapi.request(self.api, "GET", entry.path, timeout=(10, 60)).data)
        except kubeapi.ApiError as exc:
            if exc.status != 404:
                log.warning("reading %s to judge it failed (HTTP %s); judged at its next change or resync",
                            entry.path, exc.status)
            return None
        except Exception as exc:  # noqa: BLE001 - one workload's read must not stop the pass
            log.warning("reading %s to judge it failed (%s); judged at its next change or resync", entry.path,
                        type(exc).__name__)
            return None
        if str((raw.get("metadata") or {}).get("uid") or "") != entry.subject.uid:
            return None  # deleted and made again: its own events say so
        raw.setdefault("apiVersion", entry.subject.api_version)
        raw.setdefault("kind", entry.subject.kind)
        return strip_server_fields(raw)

    def _judge(self, key: WorkloadKey, entry: Any) -> None:
        namespace = entry.subject.namespace
        obj = entry.obj()
        if obj is None:
            obj = self._read_again(entry)
            if obj is None:
                return
            self.read_again += 1
            metrics.READ_AGAIN.inc()
        ctx = RequestContext(operation="CREATE", namespace=namespace,
                             namespace_labels=dict(self.index.namespace_labels.get(namespace or "", {})),
                             read_object=self.runtimes)
        outcome = judge(self.engine.evaluate, obj, ctx, entry.subject, self.policies, self.titles)
        facts = metrics.Facts(namespace or "")
        if outcome.relevant:
            built = build(outcome, time.time(), self.report_api)
            if self.reports_served:
                self.writer.put(built)
            self.reports[key] = (namespace or "", built.report["metadata"]["name"])
            for r in built.report["results"]:
                pair = (r["policy"], r["result"])
                facts.results[pair] = facts.results.get(pair, 0) + 1
        elif key in self.reports:
            report = self.reports.pop(key)
            if self.reports_served:
                self.writer.delete(report)
        self._add_cost(outcome, entry.finished, facts)
        self.facts[key] = facts

    def _add_cost(self, outcome: Outcome, finished: bool, facts: metrics.Facts) -> None:
        risk = at_risk(outcome, self.prices, finished)
        if risk is not None:
            facts.gpu_hours, facts.usd = risk.gpu_hours_per_day, risk.usd_per_day
        if finished or outcome.decision is None or not outcome.accelerators:
            return  # a CPU workload's class is never read (the engine left it unread: nothing judged it)
        cls = outcome.decision.workload_class or "unknown"
        for resource, n in outcome.accelerators.items():
            facts.accelerators[(resource, cls)] = n
