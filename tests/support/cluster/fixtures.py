"""pytest fixtures for the real control plane, shared by every e2e test module.

Import into a conftest or test module: ``from .cluster.fixtures import control_plane  # noqa: F401``
(``scheduling_control_plane`` for the same with the real kube-scheduler).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from .controlplane import BUILD_SCRIPT, ControlPlane, binaries_available, cache_dir, can_build


def require_control_plane() -> None:
    """Skip (locally) or fail (in CI) when the binaries are missing and cannot be built.

    Locally a developer without Go should still be able to run the unit tests, so e2e tests are
    skipped with instructions.  In CI (``CI`` set) a skip would silently hide the e2e suite, so it
    is a failure instead.
    """
    ok, _ = binaries_available()
    if ok:
        return
    buildable, why = can_build()
    if buildable:
        return  # ControlPlane.start() builds them (slow the first time)
    if os.environ.get("CI"):
        pytest.fail(f"e2e control plane unavailable in CI: {why}", pytrace=False)
    pytest.skip(
        f"e2e control plane unavailable: {why} To enable: install Go >= 1.24 and run "
        f"`bash {BUILD_SCRIPT}` once (cold build ~5-6 min on 2 cores, binaries cached in {cache_dir()}), "
        "or point GPUGUARD_E2E_CACHE at a directory that already holds them."
    )


@pytest.fixture(scope="module")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A running etcd + kube-apiserver + kube-controller-manager for one test module.

    Module scope: start-up costs ~10-30 s, too much per test, while a per-session cluster would
    let modules leak state into each other.  Tests should still use fresh namespaces.
    """
    require_control_plane()
    failed_before = request.session.testsfailed
    with ControlPlane() as cp:
        yield cp
        if request.session.testsfailed > failed_before:
            print(f"\n[controlplane] tests failed; component logs kept in {cp.logs_dir}", file=sys.stderr)


@pytest.fixture(scope="module")
def scheduling_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """:func:`control_plane` plus the real kube-scheduler (``ControlPlane(scheduler=True)``).

    The controller manager runs without its node-lifecycle controller, so Nodes made Ready with
    :meth:`ControlPlane.add_node` stay Ready (and untainted) for the whole module without a kubelet.
    The apiserver also runs GKE's ``ExtendedResourceToleration`` admission plugin: a pod asking for an
    extended resource (``nvidia.com/gpu``) tolerates the taint of that name, as on GKE.
    """
    require_control_plane()
    failed_before = request.session.testsfailed
    with ControlPlane(scheduler=True,
                      extra_apiserver_args=["--enable-admission-plugins=ExtendedResourceToleration"]) as cp:
        yield cp
        if request.session.testsfailed > failed_before:
            print(f"\n[controlplane] tests failed; component logs kept in {cp.logs_dir}", file=sys.stderr)
