"""HTTP(S) for Prometheus and the kubelet: /metrics, /healthz, /readyz.

With an authorizer, /metrics answers only a bearer token allowed `get` on /metrics
(kube.metricsauth): it carries what each tenant holds. The probes stay open. With a TLS
context the port serves HTTPS (the webhook's serving certificate), so the token is not
sent in the clear.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gpu_binder.kube.metricsauth import TokenAuthorizer

log = logging.getLogger(__name__)


class MetricsServer:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        host: str = "0.0.0.0",
        port: int = 8080,
        ready: Callable[[], bool] = lambda: True,
        authorizer: TokenAuthorizer | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.registry = registry
        self.authorizer = authorizer
        self.ssl_context = ssl_context
        self.host = host
        self.port = port
        self.ready = ready
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, ssl_context=self.ssl_context, reuse_address=True
        )
        await site.start()
        log.info("metrics serving", extra={"port": self.port})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def metrics(self, request: web.Request) -> web.Response:
        if self.authorizer is not None:
            verdict = await self.authorizer.check(request.headers.get("Authorization"))
            if verdict.status != 200:
                return web.Response(status=verdict.status, text=verdict.reason)
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")
