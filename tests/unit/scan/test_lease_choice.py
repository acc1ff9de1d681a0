"""Why the scan keeps its own Lease code (``webhook/scan/lease.py``) rather than the Kubernetes client's
``kubernetes.leaderelection``: what the library lacks, checked against the installed library, so that this
test fails, and the choice is made again, the day it gains it."""

from __future__ import annotations

import inspect

from kubernetes.leaderelection.leaderelection import LeaderElection


def test_the_client_librarys_election_can_neither_stop_nor_release():
    public = {name for name in dir(LeaderElection) if not name.startswith("_")}
    assert not public & {"release", "stop", "close", "shutdown", "cancel", "step_down"}, public
    assert "while True" in inspect.getsource(LeaderElection.acquire)  # blocks its thread until it leads


def test_the_client_librarys_election_never_stands_by_again_after_losing():
    """``run()`` acquires once and returns when renewing fails: no loop brings it back as a candidate."""
    source = inspect.getsource(LeaderElection.run)
    assert "self.acquire()" in source and "while" not in source
