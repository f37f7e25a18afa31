"""The webhook's HTTPS server: VMI AdmissionReviews on /mutate, answered by the Admitter,
and Pod ones on /mutate-pods, answered by the PodPinner (DESIGN §4).

Until this replica's caches are synced it refuses every review with words that say
gpu-binder is not available yet: deciding on an empty world would find no class in a VMI's
order and let it start unpinned. The webhook configurations' matchConditions send only
objects that carry GPUs, so nothing else waits on this.

The serving certificate is read from files that cert-manager or a Secret mount replaces
in place; they are checked every `reload_interval` and loaded into the live TLS context,
so new connections get the new certificate without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.webhook import Admitter, BadReview, parse_review
from gpu_binder.webhook.pods import PodPinner
from gpu_binder.webhook.review import denied

log = logging.getLogger(__name__)

MUTATE_PATH = "/mutate"
MUTATE_PODS_PATH = "/mutate-pods"
MAX_BODY = 8 * 1024 * 1024
NOT_READY = (
    "gpu-binder is unavailable: this replica has not read the cluster yet (it is "
    "starting); KubeVirt will retry"
)
Admit = Callable[[object], Awaitable[dict[str, Any]]]


class CertificateFiles:
    """A TLS server context following a certificate and key on disk."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[object, ...] = ()
        self.reload()

    def _current(self) -> tuple[object, ...]:
        # stat follows the symlinks a Secret volume swaps, so a new target shows here.
        stats = (os.stat(self.cert_file), os.stat(self.key_file))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when they did."""
        stamp = self._current()
        if stamp == self._stamp:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._stamp = stamp
        return True


class WebhookServer:
    def __init__(
        self,
        admitter: Admitter,
        certs: CertificateFiles,
        metrics: RunMetrics,
        *,
        pods: PodPinner | None = None,
        host: str = "0.0.0.0",
        port: int = 9443,
        reload_interval: float = 10.0,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.admitter = admitter
        # None: no pod webhook is served (its path answers 404).
        self.pods = pods
        self.certs = certs
        self.metrics = metrics
        self.host = host
        self.port = port
        self.reload_interval = reload_interval
        self.ready = ready
        self._runner: web.AppRunner | None = None
        self._reloader: asyncio.Task[None] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(MUTATE_PATH, self.mutate)
        if self.pods is not None:
            app.router.add_post(MUTATE_PODS_PATH, self.mutate_pods)
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/readyz", self.readyz)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, ssl_context=self.certs.context, reuse_address=True
        )
        await site.start()
        self._reloader = asyncio.create_task(self._reload_loop(), name="cert-reload")
        paths = [MUTATE_PATH] + ([MUTATE_PODS_PATH] if self.pods is not None else [])
        log.info("webhook serving", extra={"port": self.port, "paths": paths})

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            await asyncio.gather(self._reloader, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def mutate(self, request: web.Request) -> web.Response:
        return await self._serve(request, "vmi", self.admitter.admit)

    async def mutate_pods(self, request: web.Request) -> web.Response:
        assert self.pods is not None
        return await self._serve(request, "pod", self.pods.admit)

    async def _serve(self, request: web.Request, webhook: str, admit: Admit) -> web.Response:
        started = time.perf_counter()
        try:
            review = orjson.loads(await request.read())
            if self.ready():
                response = await admit(review)
            else:
                response = denied(parse_review(review).uid, NOT_READY)
        except (orjson.JSONDecodeError, BadReview) as e:
            self.metrics.bad_reviews.inc()
            reason = e.reason if isinstance(e, BadReview) else f"the body is not JSON: {e}"
            return web.Response(status=400, text=reason)
        allowed = str(bool(response.get("response", {}).get("allowed"))).lower()
        self.metrics.admissions.labels(webhook, allowed).observe(time.perf_counter() - started)
        return web.Response(body=orjson.dumps(response), content_type="application/json")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                if self.certs.reload():
                    self.metrics.cert_reloads.inc()
                    log.info("reloaded the serving certificate")
            except (OSError, ssl.SSLError) as e:
                # Mid-rotation the pair may not match yet: keep serving the old one.
                log.warning("serving certificate not reloaded: %s", e)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")
