"""Fixtures of the end-to-end suite: the real control plane (from ``cluster/``) for every module."""

from .cluster.fixtures import control_plane  # noqa: F401  (re-exported pytest fixture)
