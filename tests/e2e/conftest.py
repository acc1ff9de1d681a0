"""Fixtures of the end-to-end suite: the real control plane (from ``tests/support/cluster/``) for every module.

``release/`` holds what only the newest release in the matrix serves (``scripts/test.sh`` runs it with that release's
control plane): a run against an older release leaves it out of collection, neither run nor skipped.
"""

from tests.support.cluster.controlplane import K8S_VERSION
from tests.support.cluster.fixtures import control_plane  # noqa: F401  (re-exported pytest fixture)

NEWEST_FEATURES_SINCE = 36  # the in-tree gang's PodGroup and DRA extended resources (beta) arrive in 1.36


def _minor(version: str) -> int:
    try:
        return int(version.lstrip("v").split(".")[1])
    except (IndexError, ValueError):
        return 0


collect_ignore = ["release"] if _minor(K8S_VERSION) < NEWEST_FEATURES_SINCE else []
