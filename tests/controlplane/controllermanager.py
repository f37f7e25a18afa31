"""kube-controller-manager beside the session's apiserver, for the tests that need its
namespace controller (a real namespace deletion), its quota controller (a ResourceQuota's
status.used, which the apiserver's quota admission needs to let a pod in) and role
aggregation (gpu-binder-tenant into the built-in admin role).

Started as the node tier starts it (envtest.components: its bootstrap identity, every
controller with its own service account, a random loopback port whose /healthz is
polled), but only for the module that asks and with only these controllers: garbage
collection would change what the session's other tests see. The binary is the node
path's (scripts/build-controlplane.sh --node, in the control plane's cache).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gpu_binder.envtest import ControlPlane
from gpu_binder.envtest.assets import find_node_assets
from gpu_binder.envtest.components import (
    CONTROLLER_MANAGER,
    component_kubeconfig,
    start_component,
)
from gpu_binder.envtest.process import Process

CONTROLLERS = ",".join(
    (
        "namespace",
        "garbagecollector",
        "resourcequota",
        "serviceaccount-token",
        "clusterrole-aggregation",
    )
)


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[Process]:
    """kube-controller-manager for this module's tests; skipped (failed under CI=true)
    when the node path's binaries were not built."""
    assets = find_node_assets()
    if assets is None:
        why = f"{CONTROLLER_MANAGER} not built: scripts/build-controlplane.sh --node builds it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    work = control_plane.work_dir
    kubeconfig = component_kubeconfig(
        control_plane.certs, control_plane.url, work, CONTROLLER_MANAGER
    )
    flags = {"controllers": CONTROLLERS, "resource-quota-sync-period": "5s"}
    proc = start_component(
        CONTROLLER_MANAGER, assets.kube_controller_manager, work, kubeconfig, flags, 60.0
    )
    try:
        yield proc
    finally:
        proc.stop()
