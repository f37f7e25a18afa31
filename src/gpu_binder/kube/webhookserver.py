"""The webhook's HTTPS server: AdmissionReviews on /mutate, answered by the Admitter.

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
from collections.abc import Callable
from pathlib import Path

import orjson
from aiohttp import web

from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.webhook import Admitter, BadReview

log = logging.getLogger(__name__)

MUTATE_PATH = "/mutate"
MAX_BODY = 8 * 1024 * 1024


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
        host: str = "0.0.0.0",
        port: int = 9443,
        reload_interval: float = 10.0,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        self.admitter = admitter
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
        log.info("webhook serving", extra={"port": self.port, "path": MUTATE_PATH})

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            await asyncio.gather(self._reloader, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def mutate(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            review = orjson.loads(await request.read())
            response = await self.admitter.admit(review)
        except (orjson.JSONDecodeError, BadReview) as e:
            self.metrics.bad_reviews.inc()
            reason = e.reason if isinstance(e, BadReview) else f"the body is not JSON: {e}"
            return web.Response(status=400, text=reason)
        allowed = bool(response.get("response", {}).get("allowed"))
        self.metrics.admissions.labels(str(allowed).lower()).observe(time.perf_counter() - started)
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
