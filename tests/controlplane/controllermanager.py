"""kube-controller-manager beside the session's apiserver, for the tests that need its
namespace controller (a real namespace deletion) and its quota controller (a
ResourceQuota's status.used, which the apiserver's quota admission needs to let a pod in).

Started the way the tier starts the apiserver (envtest.process: a random loopback port,
/healthz polled, its log under the control plane's work dir), as kubeadm starts it: its
own client certificate for the bootstrap user system:kube-controller-manager, every
controller with its own service account, tokens signed with the apiserver's key. Only the
controllers these tests need run (namespace, garbage collector, resource quota, role
aggregation), and only
for the module that asks: garbage collection would change what the session's other
tests see.

The binary is built by scripts/build-controlplane.sh --node into the control plane's cache;
branch node-path adds the same component to envtest itself (ControlPlane(components=...)),
which should replace this fixture once it is on main.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_binder.envtest import ControlPlane
from gpu_binder.envtest.assets import cache_dir
from gpu_binder.envtest.process import LOOPBACK, Process, free_port, https_ok, launch, start_ready

NAME = "kube-controller-manager"
USER = "system:kube-controller-manager"
# clusterrole-aggregation: the gpu-binder-tenant role reaches the built-in admin role.
CONTROLLERS = (
    "namespace,garbagecollector,resourcequota,serviceaccount-token,clusterrole-aggregation"
)


def binary() -> Path | None:
    path = cache_dir() / NAME
    return path if path.is_file() else None


def _insecure() -> ssl.SSLContext:
    # It serves /healthz with a certificate it makes itself: only "ok?" is asked.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def start(cp: ControlPlane, exe: Path, timeout: float = 60.0) -> Process:
    user = cp.add_user(USER)
    work = cp.work_dir
    certs = work / "certs"

    def launch_once() -> tuple[Process, functools.partial[bool]]:
        port = free_port()
        flags: dict[str, str | None] = {
            "kubeconfig": str(user.kubeconfig),
            "authentication-kubeconfig": str(user.kubeconfig),
            "authorization-kubeconfig": str(user.kubeconfig),
            "authentication-skip-lookup": "true",
            "bind-address": LOOPBACK,
            "secure-port": str(port),
            "cert-dir": str(work / "kcm-serving"),
            "leader-elect": "false",
            "use-service-account-credentials": "true",
            "service-account-private-key-file": str(certs / "sa.key"),
            "root-ca-file": str(certs / "ca.crt"),
            "controllers": CONTROLLERS,
            # Seconds, not minutes, between a namespace's deletion and its objects' going.
            "concurrent-gc-syncs": "20",
            "resource-quota-sync-period": "5s",
            "profiling": "false",
        }
        proc = launch(NAME, exe, work, flags, {})
        url = f"https://{LOOPBACK}:{port}/healthz"
        return proc, functools.partial(https_ok, url, _insecure())

    return start_ready(launch_once, f"{NAME} /healthz", timeout)


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[Process]:
    """kube-controller-manager for this module's tests; skipped (failed under CI=true)
    when its binary was not built."""
    import os

    exe = binary()
    if exe is None:
        why = f"{NAME} not in {cache_dir()}: scripts/build-controlplane.sh --node builds it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    proc = start(control_plane, exe)
    try:
        yield proc
    finally:
        proc.stop()
