"""`gpu-binder run`: the binder, webhook, metrics and probes in one process (DESIGN §6).

Every flag can also be set in the environment as GPU_BINDER_<FLAG> (e.g.
GPU_BINDER_LOST_GRACE=5m); a flag on the command line wins. SIGTERM and SIGINT shut
down cleanly: the lease is released, so the next replica takes over at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from gpu_binder.binder import Config
from gpu_binder.cli.flags import add_log_flags, boolean, duration, env_adder, names
from gpu_binder.cli.logs import setup as setup_logs
from gpu_binder.kube import ConfigError, connect
from gpu_binder.kube.leaderelection import Timings
from gpu_binder.kube.manager import Manager, Options, WebhookOptions, default_identity
from gpu_binder.kube.serving import Limits

log = logging.getLogger(__name__)

DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu-binder run",
        description="Run the binder, its admission webhook, metrics and health probes.",
        epilog="Every flag may be given in the environment as GPU_BINDER_<FLAG>, "
        "e.g. GPU_BINDER_LOST_GRACE=5m.",
    )
    d = Config()
    add = env_adder(p)
    add("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster config)")
    add("--context", default=None, help="kubeconfig context")
    add("--as", dest="as_user", default=None, help="impersonate this user (kubectl's --as)")
    add("--as-group", default="", type=names, help="impersonated groups, comma-separated")
    add("--enabled", default=d.enabled, type=boolean, help="bind GPUs (false: bookkeeping only)")
    add("--attachment-grace", default=d.attachment_grace, type=duration)
    add("--lost-grace", default=d.lost_grace, type=duration)
    add("--degraded-grace", default=d.degraded_grace, type=duration)
    add("--bind-timeout", default=d.bind_timeout, type=duration)
    add("--resync", default=d.resync, type=duration)
    add(
        "--defrag",
        default=d.defrag,
        type=boolean,
        help="move stopped VMs' sets to make room for an order that fits nowhere",
    )
    add(
        "--excluded-namespaces",
        default=d.excluded_namespaces,
        type=names,
        help="namespaces whose VMIs the webhook passes untouched, comma-separated",
    )
    add(
        "--ledger-namespace",
        default=d.ledger_namespace,
        help="where every usage record lives; tenants read copies in their own namespaces",
    )
    add("--kubevirt-namespace", default=d.kubevirt_namespace)
    add("--kubevirt-name", default=d.kubevirt_name)
    add("--leader-elect", default=True, type=boolean, help="false: reconcile without a lease")
    add("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "gpu-binder"))
    add("--lease-name", default="gpu-binder")
    add("--identity", default=os.environ.get("POD_NAME") or default_identity())
    add("--lease-duration", default=timedelta(seconds=15), type=duration)
    add("--renew-deadline", default=timedelta(seconds=10), type=duration)
    add("--retry-period", default=timedelta(seconds=2), type=duration)
    add("--webhook", default=True, type=boolean, help="serve the admission webhook")
    add("--webhook-host", default="0.0.0.0")
    add("--webhook-port", default=9443, type=int)
    add("--tls-cert-file", default=f"{DEFAULT_CERT_DIR}/tls.crt", type=Path)
    add("--tls-key-file", default=f"{DEFAULT_CERT_DIR}/tls.key", type=Path)
    add("--cert-reload-interval", default=timedelta(seconds=10), type=duration)
    add(
        "--webhook-client-ca-file",
        default=None,
        type=Path,
        help="require a client certificate signed by this CA (the API server's, named in "
        "its AdmissionConfiguration kubeconfig); unset: any client is served",
    )
    add(
        "--webhook-client-names",
        default="",
        type=names,
        help="accept only client certificates with one of these common or DNS names, "
        "comma-separated (empty: any the CA signed)",
    )
    limits = Limits()
    add("--webhook-max-connections", default=limits.max_connections, type=int)
    add(
        "--webhook-idle-timeout",
        default=timedelta(seconds=limits.idle_timeout),
        type=duration,
        help="close a connection whose request's headers have not arrived this long after "
        "it opened or after its last answer",
    )
    add("--webhook-body-timeout", default=timedelta(seconds=limits.body_timeout), type=duration)
    add("--metrics-host", default="0.0.0.0")
    add("--metrics-port", default=8080, type=int, help="0: no metrics and probe server")
    add(
        "--gc-freeze-interval",
        default=timedelta(minutes=10),
        type=duration,
        help="how often the heap is collected in full and frozen, out of the garbage "
        "collector's scans (0: never; Python's own thresholds)",
    )
    add(
        "--metrics-auth",
        default=False,
        type=boolean,
        help="serve /metrics only to a bearer token allowed get on /metrics (TokenReview "
        "and SubjectAccessReview); it tells what each tenant holds",
    )
    add(
        "--metrics-tls",
        default=False,
        type=boolean,
        help="serve metrics and probes over HTTPS with the webhook's serving certificate",
    )
    add_log_flags(add)
    return p


def settings(args: argparse.Namespace) -> tuple[Config, Options]:
    config = Config(
        enabled=args.enabled,
        attachment_grace=args.attachment_grace,
        lost_grace=args.lost_grace,
        degraded_grace=args.degraded_grace,
        bind_timeout=args.bind_timeout,
        resync=args.resync,
        defrag=args.defrag,
        excluded_namespaces=args.excluded_namespaces,
        kubevirt_namespace=args.kubevirt_namespace,
        kubevirt_name=args.kubevirt_name,
        ledger_namespace=args.ledger_namespace,
    )
    webhook = (
        WebhookOptions(
            cert_file=args.tls_cert_file,
            key_file=args.tls_key_file,
            host=args.webhook_host,
            port=args.webhook_port,
            reload_interval=args.cert_reload_interval.total_seconds(),
            client_ca_file=args.webhook_client_ca_file,
            client_names=tuple(args.webhook_client_names),
            limits=Limits(
                max_connections=args.webhook_max_connections,
                idle_timeout=args.webhook_idle_timeout.total_seconds(),
                body_timeout=args.webhook_body_timeout.total_seconds(),
            ),
        )
        if args.webhook
        else None
    )
    options = Options(
        identity=args.identity,
        lease_namespace=args.lease_namespace,
        lease_name=args.lease_name,
        timings=Timings(
            args.lease_duration.total_seconds(),
            args.renew_deadline.total_seconds(),
            args.retry_period.total_seconds(),
        ),
        leader_elect=args.leader_elect,
        webhook=webhook,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port or None,
        metrics_auth=args.metrics_auth,
        metrics_tls=args.metrics_tls,
        gc_freeze_interval=args.gc_freeze_interval.total_seconds() or None,
    )
    return config, options


async def run(args: argparse.Namespace) -> int:
    config, options = settings(args)
    impersonate = (args.as_user, tuple(args.as_group)) if args.as_user else None
    try:
        client = await connect(args.kubeconfig, context=args.context, impersonate=impersonate)
    except ConfigError as e:
        print(f"gpu-binder run: {e}", file=sys.stderr)
        return 2
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    manager = Manager(client, config, options)
    log.info(
        "starting",
        extra={"identity": options.identity, "server": client.server, "enabled": config.enabled},
    )
    try:
        await manager.run(stop)
    finally:
        await client.close()
    return 0


def main_run(argv: list[str] | None = None) -> int:
    """Entry point of `gpu-binder run ARGS`."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    setup_logs(args.log_level, args.log_format)
    try:
        Timings(
            args.lease_duration.total_seconds(),
            args.renew_deadline.total_seconds(),
            args.retry_period.total_seconds(),
        )
    except ValueError as e:
        print(f"gpu-binder run: {e}", file=sys.stderr)
        return 2
    return asyncio.run(run(args))
