"""kube-apiserver for the control plane: a random loopback secure port, the run's
certificates, RBAC authorization, service-account signing keys, and the ServiceAccount
admission plugin disabled so no controller-manager is needed."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path

from .process import LOOPBACK, Process, apiserver_ready, free_port, launch, start_ready


def start_apiserver(
    binary: Path,
    work: Path,
    etcd_url: str,
    ctx: ssl.SSLContext,
    flags: Mapping[str, str | None],
    timeout: float,
    port: int | None = None,
) -> tuple[Process, str]:
    """Start kube-apiserver on etcd_url and wait until /healthz and /readyz answer ok (as
    ctx's client); the process and its URL. Certificates are read from work/certs.

    flags override or add flags (names without ``--``; None removes a default flag).
    port: the one to listen on (a restart keeps its clients' URL); default a free one.
    """
    certs = work / "certs"
    url = ""

    def start() -> tuple[Process, Callable[[], bool]]:
        nonlocal url
        port_ = port or free_port()
        url = f"https://{LOOPBACK}:{port_}"
        defaults: dict[str, str | None] = {
            "advertise-address": LOOPBACK,
            "bind-address": LOOPBACK,
            "secure-port": str(port_),
            "etcd-servers": etcd_url,
            "cert-dir": str(certs),
            "tls-cert-file": str(certs / "apiserver.crt"),
            "tls-private-key-file": str(certs / "apiserver.key"),
            "client-ca-file": str(certs / "ca.crt"),
            "service-account-issuer": f"{url}/",
            "service-account-key-file": str(certs / "sa.pub"),
            "service-account-signing-key-file": str(certs / "sa.key"),
            "service-cluster-ip-range": "10.0.0.0/24",
            # Node: kubelets (system:node:<name>) get what their own pods need, as in a
            # cluster; everyone else goes by RBAC.
            "authorization-mode": "Node,RBAC",
            # Pod logs and exec go through the kubelet, which trusts the run's CA.
            "kubelet-client-certificate": str(certs / "apiserver-kubelet-client.crt"),
            "kubelet-client-key": str(certs / "apiserver-kubelet-client.key"),
            "allow-privileged": "true",
            "disable-admission-plugins": "ServiceAccount",
            "profiling": "false",
            # a loopback advertise address is refused by the endpoint reconciler (v1.3x+)
            "endpoint-reconciler-type": "none",
        }
        proc = launch("kube-apiserver", binary, work, defaults, flags)
        return proc, functools.partial(apiserver_ready, url, ctx)

    return start_ready(start, "kube-apiserver /healthz and /readyz", timeout), url
