"""Fixtures of the end-to-end suite: the real control plane (from ``cluster/``) for every module."""

from tests.e2e.cluster.fixtures import control_plane  # noqa: F401  (re-exported pytest fixture)
