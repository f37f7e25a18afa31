"""The manager: one process's informers, world, webhook, metrics, lease and controller.

Every replica keeps the caches and serves the webhook and metrics; only the lease holder
runs the controller, and its reconciler is fenced by the lease (`is_leader`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpu_binder.api.kinds import resource_of
from gpu_binder.api.types import GPUBindRequest
from gpu_binder.binder import PASS_KEY, REQUESTS_KEY, Config, LedgerTotals, Metrics, Reconciler
from gpu_binder.cache import SELECTORS, WATCHED, World, feed, namespace_of
from gpu_binder.client.interface import WatchEvent
from gpu_binder.kube.cache import Informer, Informers
from gpu_binder.kube.client import KubeClient
from gpu_binder.kube.collector import Collector
from gpu_binder.kube.controller import Controller
from gpu_binder.kube.events import BackgroundRecorder
from gpu_binder.kube.leaderelection import LeaderElector, Timings
from gpu_binder.kube.ledgerfold import fold
from gpu_binder.kube.looplag import LoopLag
from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.kube.metricsauth import TokenAuthorizer
from gpu_binder.kube.metricsserver import MetricsServer
from gpu_binder.kube.queue import WorkQueue
from gpu_binder.kube.serving import Limits
from gpu_binder.kube.webhookserver import CertificateFiles, WebhookServer
from gpu_binder.webhook import Admitter
from gpu_binder.webhook.answers import Answers
from gpu_binder.webhook.pods import PodPinner

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class WebhookOptions:
    cert_file: Path
    key_file: Path
    host: str = "0.0.0.0"
    port: int = 9443
    reload_interval: float = 10.0
    # The CA of the API server's client certificate; None serves any client (no mTLS).
    client_ca_file: Path | None = None
    client_names: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True)
class Options:
    identity: str = field(default_factory=default_identity)
    lease_namespace: str = "gpu-binder"
    lease_name: str = "gpu-binder"
    timings: Timings = field(default_factory=Timings)
    # Off: this process reconciles without a lease (one replica only, e.g. a dev cluster).
    leader_elect: bool = True
    webhook: WebhookOptions | None = None
    metrics_host: str = "0.0.0.0"
    # None: no metrics server (tests that read the registry directly).
    metrics_port: int | None = 8080
    # /metrics only for a token allowed get on it (TokenReview + SubjectAccessReview).
    metrics_auth: bool = False
    # Serve metrics over HTTPS with the webhook's serving certificate.
    metrics_tls: bool = False
    # Seconds between freezes of the heap (kube.collector); None: Python's collector as is.
    gc_freeze_interval: float | None = None


class Manager:
    def __init__(
        self,
        client: KubeClient,
        config: Config | None = None,
        options: Options | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.client = client
        self.config = config or Config()
        self.options = options or Options()
        self.clock = clock
        # Its times are the binder's own observations (World.seen_running).
        self.world = World(clock=clock or (lambda: datetime.now(UTC)))
        self.metrics = Metrics()
        # GPU-seconds of the ledger, exported by every replica (binder.ledgertotals).
        self.totals = LedgerTotals()
        self.metrics.gpu_seconds.world = self.world
        self.metrics.gpu_seconds.totals = self.totals
        if clock is not None:
            self.metrics.gpu_seconds.clock = clock
        self._fold: asyncio.Task[None] | None = None
        self.run_metrics = RunMetrics(self.metrics.registry)
        self.loop_lag = LoopLag(self.run_metrics.loop_lag)
        self.collector = Collector(
            self.metrics.registry, self.options.gc_freeze_interval, lambda: self.ready
        )
        self.queue = WorkQueue(first=[REQUESTS_KEY])
        self.informers = Informers([self._informer(kind) for kind in WATCHED])
        self.recorder = BackgroundRecorder(client, self.options.identity)
        self.answers = Answers()
        self.world.on_request = self.answers.seen
        self.admitter = Admitter(
            self.world,
            client,
            self.config,
            answers=self.answers,
            leading=self.is_leader,
            ask_here=lambda: self.queue.add(REQUESTS_KEY),
        )
        self.pods = PodPinner(self.world, self.config, client=client, leading=self.is_leader)
        # The lease's renewals on connections of their own: behind a burst's writes and
        # reads they could wait past the renew deadline, and a busy leader would let go.
        self._lease_client = client.sibling() if self.options.leader_elect else client
        self.elector = LeaderElector(
            self._lease_client,
            self.options.lease_namespace,
            self.options.lease_name,
            self.options.identity,
            self.options.timings,
            on_started=self._started_leading,
            on_stopped=self._stopped_leading,
        )
        self.controller = Controller(self.queue, self.informers, self._reconciler)
        self._controller_task: asyncio.Task[None] | None = None
        self.webhook: WebhookServer | None = None
        self.metrics_server: MetricsServer | None = None
        self._metrics_certs: CertificateFiles | None = None

    # --- wiring ---------------------------------------------------------------------

    def _informer(self, kind: type[Any]) -> Informer[Any]:
        namespace = namespace_of(kind, self.config.kubevirt_namespace)
        relisted = self.run_metrics.relists.labels(resource_of(kind).plural).inc
        return Informer(
            self.client,
            kind,
            self._on_event,
            namespace,
            label_selector=SELECTORS.get(kind),
            on_relist=relisted,
        )

    def _on_event(self, event: WatchEvent[Any]) -> None:
        feed(self.world, (event,), self.config.kubevirt_namespace)
        if isinstance(event.object, GPUBindRequest):
            self.queue.add(REQUESTS_KEY)
        self.queue.add(PASS_KEY)

    def _reconciler(self) -> Reconciler:
        return Reconciler(
            self.client,
            self.world,
            self.config,
            clock=self.clock,
            recorder=self.recorder,
            metrics=self.metrics,
            is_leader=self.is_leader,
            on_answer=lambda request: self.answers.seen(request, False),
        )

    def is_leader(self) -> bool:
        return not self.options.leader_elect or self.elector.is_leader()

    @property
    def ready(self) -> bool:
        return self.informers.synced

    # --- running --------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve and reconcile until stop is set; then release the lease and shut down."""
        await self.start()
        try:
            if self.options.leader_elect:
                await self.elector.run(stop)
            else:
                self._started_leading()
                await stop.wait()
                self._stopped_leading()
        finally:
            await self.shutdown()

    async def start(self) -> None:
        self.collector.start()
        self.loop_lag.start()
        self.informers.start()
        self._fold = asyncio.create_task(
            fold(self.client, self.config.ledger_namespace, self.totals), name="ledger-fold"
        )
        self.recorder.start()
        webhook = self.options.webhook
        metrics_tls = self._metrics_tls()
        if webhook is not None:
            self.webhook = WebhookServer(
                self.admitter,
                CertificateFiles(webhook.cert_file, webhook.key_file, webhook.client_ca_file),
                self.run_metrics,
                pods=self.pods,
                host=webhook.host,
                port=webhook.port,
                reload_interval=webhook.reload_interval,
                ready=lambda: self.ready,
                limits=webhook.limits,
                client_names=webhook.client_names,
                also_reload=(self._metrics_certs,) if self._metrics_certs else (),
            )
            await self.webhook.start()
        if self.options.metrics_port is not None:
            self.metrics_server = MetricsServer(
                self.metrics.registry,
                host=self.options.metrics_host,
                port=self.options.metrics_port,
                ready=lambda: self.ready,
                authorizer=TokenAuthorizer(self.client) if self.options.metrics_auth else None,
                ssl_context=metrics_tls,
            )
            await self.metrics_server.start()

    def _metrics_tls(self) -> ssl.SSLContext | None:
        webhook = self.options.webhook
        if not self.options.metrics_tls:
            return None
        if webhook is None:
            raise ValueError("metrics over TLS use the webhook's serving certificate")
        # A context of its own (the webhook's asks clients for a certificate), reloaded by
        # the webhook server's loop with its own.
        self._metrics_certs = CertificateFiles(webhook.cert_file, webhook.key_file)
        return self._metrics_certs.context

    async def shutdown(self) -> None:
        self._stopped_leading()
        if self._controller_task is not None:
            await asyncio.gather(self._controller_task, return_exceptions=True)
        self.queue.shutdown()
        if self.webhook is not None:
            await self.webhook.stop()
        # Answered bind requests are deleted after the reply; finish that before the client goes.
        await self.admitter.drain()
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        await self.recorder.stop()
        if self._fold is not None:
            self._fold.cancel()
            await asyncio.gather(self._fold, return_exceptions=True)
        await self.informers.stop()
        if self._lease_client is not self.client:
            await self._lease_client.close()
        await self.collector.stop()
        await self.loop_lag.stop()
        log.info("stopped", extra={"identity": self.options.identity})

    def _started_leading(self) -> None:
        self.run_metrics.leader.set(1)
        self.world.written.clear()  # only this term's own writes (World.written_device)
        self._controller_task = asyncio.create_task(self._lead(), name="controller")

    def _stopped_leading(self) -> None:
        self.run_metrics.leader.set(0)
        self.world.written.clear()
        # No reconciler here answers the webhook's in-memory requests any more, and the
        # next leader never sees them: refused, so KubeVirt retries (webhook.decision).
        for asked in self.world.asked.values():
            self.answers.abandon(asked)
        self.world.asked.clear()
        if self._controller_task is not None and not self._controller_task.done():
            self._controller_task.cancel()

    async def _lead(self) -> None:
        try:
            await self.controller.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("the controller stopped")
