"""kube-scheduler and kube-controller-manager for the control plane, started as
kubeadm's static pods start them: each with its own client certificate and kubeconfig
(the bootstrap RBAC roles ``system:kube-scheduler`` / ``system:kube-controller-manager``
are bound to those user names), a random loopback secure port whose ``/healthz`` is
polled, and no leader election (one of each).

The controller-manager gives every controller its own service account
(``--use-service-account-credentials``, the bootstrap roles ``system:controller:*``), signs
their tokens with the apiserver's service-account key and hands the CA to pods, so
garbage collection, namespace finalization and the node lifecycle run as in a cluster.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path

from .certs import ControlPlaneCerts
from .files import write_kubeconfig
from .process import LOOPBACK, Process, free_port, https_ok, launch, start_ready

SCHEDULER = "kube-scheduler"
CONTROLLER_MANAGER = "kube-controller-manager"
# The scheduler's client rate (its default is 50/s): a test cluster's scheduler is not
# throttled below what its apiserver serves, so a benchmark measures placement, not that.
SCHEDULER_QPS = 500
# The user names the bootstrap ClusterRoleBindings grant the components' roles to.
USERS = {
    SCHEDULER: "system:kube-scheduler",
    CONTROLLER_MANAGER: "system:kube-controller-manager",
}


def component_kubeconfig(certs: ControlPlaneCerts, url: str, work: Path, name: str) -> Path:
    """A kubeconfig for the component name, authenticating as its bootstrap user."""
    directory = work / "components"
    directory.mkdir(exist_ok=True)
    pair = certs.ca.issue_client(USERS[name])
    path = directory / f"{name}.kubeconfig"
    write_kubeconfig(path, url, certs.ca.cert_pem, pair.cert_pem, pair.key_pem, USERS[name])
    return path


def _scheduler_config(work: Path, kubeconfig: Path) -> Path:
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(kubeconfig),
            "qps": SCHEDULER_QPS,
            "burst": 2 * SCHEDULER_QPS,
        },
        "leaderElection": {"leaderElect": False},
    }
    path = work / "components" / "kube-scheduler.yaml"
    path.write_text(json.dumps(config))
    return path


def _self_signed_ok() -> ssl.SSLContext:
    # The components serve /healthz with a certificate they make themselves (--cert-dir);
    # only "does it answer ok" is asked, so it is not verified.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def start_component(
    name: str,
    binary: Path,
    work: Path,
    kubeconfig: Path,
    flags: Mapping[str, str | None],
    timeout: float,
) -> Process:
    """Start kube-scheduler or kube-controller-manager on a random loopback port; return
    once its /healthz answers ok. flags override or add flags (None removes one)."""
    certs = work / "certs"

    def start() -> tuple[Process, Callable[[], bool]]:
        port = free_port()
        defaults: dict[str, str | None] = {
            "kubeconfig": str(kubeconfig),
            "authentication-kubeconfig": str(kubeconfig),
            "authorization-kubeconfig": str(kubeconfig),
            "bind-address": LOOPBACK,
            "secure-port": str(port),
            "cert-dir": str(work / "components" / f"{name}-serving"),
            "leader-elect": "false",
            # Nothing calls them through an aggregating proxy: no requestheader CA to read.
            "authentication-skip-lookup": "true",
            "profiling": "false",
        }
        if name == CONTROLLER_MANAGER:
            defaults |= {
                "use-service-account-credentials": "true",
                "service-account-private-key-file": str(certs / "sa.key"),
                "root-ca-file": str(certs / "ca.crt"),
                # No cloud: routes and node CIDRs are the CNI's business (there is none).
                "allocate-node-cidrs": "false",
                "configure-cloud-routes": "false",
                # Seconds, not minutes, between a namespace's deletion and its objects' going.
                "concurrent-gc-syncs": "20",
            }
        if name == SCHEDULER:
            # Its client rate is set only in its configuration file, which then holds the
            # kubeconfig and leader election too.
            del defaults["kubeconfig"], defaults["leader-elect"]
            defaults["config"] = str(_scheduler_config(work, kubeconfig))
        proc = launch(name, binary, work, defaults, flags)
        url = f"https://{LOOPBACK}:{port}/healthz"
        return proc, functools.partial(https_ok, url, _self_signed_ok())

    return start_ready(start, f"{name} /healthz", timeout)
