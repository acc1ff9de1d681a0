"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Only the holder writes reports and exports the findings metrics; the other replicas keep their
watches warm and take over when the holder stops renewing (crash, eviction, network partition) and the
lease expires.  Every write of the Lease carries the resourceVersion read, so two candidates racing for
an expired lease cannot both win: the apiserver answers the second with 409 Conflict.

A holder that cannot renew steps down after ``renew_deadline`` (shorter than the lease duration), so
it has stopped writing before anybody else can acquire the lease.  On a clean shutdown it releases
the lease (empty holder) so a stand-by takes over at once.

Why not the Kubernetes client's own ``kubernetes.leaderelection`` (compared for issue 35): its
``LeaderElection.run()`` blocks its thread in ``while True`` loops with no way to stop it from outside and
no release, so a scan pod on SIGTERM could neither finish its write nor hand over, and every rollout
would leave reports unwritten for a whole lease duration (here the stand-by leads within a round:
``tests/e2e/test_scan_e2e.py`` measures it); and once it fails to renew, ``run()`` returns for good,
where a scan must stand by again.  ``tests/unit/scan/test_lease_choice.py`` fails when the library gains
a stop or release, the moment to compare again.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from gpuguard.kubeapi.client import ApiError, request

log = logging.getLogger("gpuguard.scan.lease")


def _micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(value: Any) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.strptime(value.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
    except ValueError:
        try:
            return datetime.strptime(value.replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return 0.0


class Lease:
    """One candidate for the lease ``namespace/name``."""

    def __init__(self, api: Any, namespace: str, name: str, identity: str, *, duration: float = 15.0,
                 renew_deadline: float = 10.0) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.duration, self.renew_deadline = duration, renew_deadline
        self.leading = False
        self._renewed = 0.0  # monotonic time of the last successful acquire or renew
        self.transitions = 0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def _spec(self, now: float, acquired: str | None, transitions: int) -> dict[str, Any]:
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.duration),
                "acquireTime": acquired or _micro_time(now), "renewTime": _micro_time(now),
                "leaseTransitions": transitions}

    def try_acquire_or_renew(self) -> bool:
        """One round: acquire or renew; ``leading`` says the outcome (kept through a short API outage)."""
        try:
            won = self._round(time.time())
            if won:
                self._renewed = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the API unreachable: keep leading until the deadline
            log.warning("lease %s/%s: %s", self.namespace, self.name, type(exc).__name__)
            won = self.leading and time.monotonic() - self._renewed < self.renew_deadline
        if won != self.leading:
            log.info("lease %s/%s: %s", self.namespace, self.name, "acquired, writing reports" if won else
                     "lost, standing by")
        self.leading = won
        return won

    def _round(self, now: float) -> bool:
        try:
            current = orjson.loads(request(self.api, "GET", f"{self.path}/{self.name}", timeout=5).data)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(now, None, 0)}
            return self._write("POST", self.path, body)
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = _parse(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        if holder and holder != self.identity and now < renewed + duration:
            return False  # somebody else holds a live lease
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
        acquired = spec.get("acquireTime") if holder == self.identity else None
        current["spec"] = self._spec(now, acquired, transitions)
        self.transitions = transitions
        return self._write("PUT", f"{self.path}/{self.name}", current)

    def _write(self, method: str, path: str, body: dict) -> bool:
        try:
            request(self.api, method, path, body=body, timeout=5).release_conn()
        except ApiError as exc:
            if exc.status in (409, 422):  # another candidate wrote first
                return False
            raise
        return True

    def release(self) -> None:
        """Give the lease up (empty holder) so a stand-by takes over without waiting for it to expire."""
        if not self.leading:
            return
        self.leading = False
        try:
            current = orjson.loads(request(self.api, "GET", f"{self.path}/{self.name}", timeout=5).data)
            if (current.get("spec") or {}).get("holderIdentity") == self.identity:
                current["spec"]["holderIdentity"] = ""
                current["spec"]["leaseDurationSeconds"] = 1
                request(self.api, "PUT", f"{self.path}/{self.name}", body=current, timeout=5).release_conn()
        except Exception as exc:  # noqa: BLE001 - it expires by itself
            log.warning("releasing lease %s/%s failed: %s", self.namespace, self.name, type(exc).__name__)
