"""Fixtures of the end-to-end suite: the real control plane (from ``tests/support/cluster/``) for every module."""

from tests.support.cluster.fixtures import control_plane  # noqa: F401  (re-exported pytest fixture)
