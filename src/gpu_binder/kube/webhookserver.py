"""The webhook's HTTPS server: VMI AdmissionReviews on /mutate, answered by the Admitter,
and Pod ones on /mutate-pods, answered by the PodPinner (DESIGN §4).

Until this replica's caches are synced it refuses every review with words that say
gpu-binder is not available yet: deciding on an empty world would find no class in a VMI's
order and let it start unpinned. The webhook configurations' matchConditions send only
objects that carry GPUs, so nothing else waits on this.

The serving certificate is read from files that cert-manager or a Secret mount replaces
in place; they are checked every `reload_interval` and loaded into the live TLS context,
so new connections get the new certificate without a restart.

Only the API server is served (issue 11): with a client CA, the handshake requires a
certificate it signed (the one the API server's AdmissionConfiguration kubeconfig names),
and connections, times, sizes and parsing are bounded (kube.serving).
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
from gpu_binder.kube.serving import (
    BodyTimeout,
    Connections,
    Limits,
    Parser,
    client_allowed,
    read_body,
    serve,
)
from gpu_binder.webhook import Admitter, BadReview, parse_review
from gpu_binder.webhook.pods import PodPinner
from gpu_binder.webhook.review import denied

log = logging.getLogger(__name__)

MUTATE_PATH = "/mutate"
MUTATE_PODS_PATH = "/mutate-pods"
# The API server's authorization webhook for the node agent's reads beyond its node
# (deploy/apiserver/authorization-config.yaml): its matchConditions send only those.
AUTHORIZE_PATH = "/authorize"
NODE_EXTRA = "authentication.kubernetes.io/node-name"
NOT_READY = (
    "gpu-binder is unavailable: this replica has not read the cluster yet (it is "
    "starting); KubeVirt will retry"
)
Admit = Callable[[object], Awaitable[dict[str, Any]]]


class CertificateFiles:
    """A TLS server context following a certificate and key on disk, and the CA that signs
    the client certificates it requires (none: no client certificate is asked for)."""

    def __init__(self, cert_file: Path, key_file: Path, client_ca_file: Path | None = None) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca_file is not None:
            self.context.verify_mode = ssl.CERT_REQUIRED
        self._stamp: tuple[object, ...] = ()
        self.reload()

    def _files(self) -> list[Path]:
        return [
            self.cert_file,
            self.key_file,
            *([self.client_ca_file] if self.client_ca_file else []),
        ]

    def _current(self) -> tuple[object, ...]:
        # stat follows the symlinks a Secret volume swaps, so a new target shows here.
        stats = [os.stat(f) for f in self._files()]
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def reload(self) -> bool:
        """Load the files if they changed since the last load; True when they did.

        A new client CA is added to the ones trusted; one no longer in the file stays
        trusted until a restart (a TLS context cannot forget a CA)."""
        stamp = self._current()
        if stamp == self._stamp:
            return False
        self.context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            self.context.load_verify_locations(cafile=str(self.client_ca_file))
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
        limits: Limits | None = None,
        client_names: tuple[str, ...] = (),
        also_reload: tuple[CertificateFiles, ...] = (),
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
        if client_names and certs.client_ca_file is None:
            # Names are checked on a verified certificate: without a CA none is asked for.
            raise ValueError("client names need a client CA (--webhook-client-ca-file)")
        self.limits = limits or Limits()
        # Empty: any certificate the client CA signed.
        self.client_names = client_names
        self.parser = Parser()
        # Other contexts of the same files (the metrics server's), reloaded with it.
        self.also_reload = also_reload
        self.connections = Connections(
            self.limits.max_connections, metrics.refused.labels("connections").inc
        )
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._reloader: asyncio.Task[None] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.limits.max_body)
        app.router.add_post(MUTATE_PATH, self.mutate)
        if self.pods is not None:
            app.router.add_post(MUTATE_PODS_PATH, self.mutate_pods)
        app.router.add_post(AUTHORIZE_PATH, self.authorize)
        app.router.add_get("/healthz", _ok)
        app.router.add_get("/readyz", self.readyz)
        return app

    async def start(self) -> None:
        # aiohttp's keep-alive timer also closes a connection whose request has not
        # arrived whole within it: the header timeout.
        self._runner = web.AppRunner(
            self.app(),
            access_log=None,
            keepalive_timeout=self.limits.idle_timeout,
            # After a refusal with a body still coming, read on only briefly (so the
            # client sees the answer) before closing: a slow sender gains nothing.
            lingering_time=1.0,
        )
        await self._runner.setup()
        self._server = await serve(
            self._runner, self.host, self.port, self.certs.context, self.limits, self.connections
        )
        self._reloader = asyncio.create_task(self._reload_loop(), name="cert-reload")
        paths = [MUTATE_PATH] + ([MUTATE_PODS_PATH] if self.pods is not None else [])
        log.info("webhook serving", extra={"port": self.port, "paths": paths})

    async def stop(self) -> None:
        if self._reloader is not None:
            self._reloader.cancel()
            await asyncio.gather(self._reloader, return_exceptions=True)
        if self._server is not None:
            self._server.close()
            self._server = None
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
        if not client_allowed(request, self.client_names):
            # Signed by the client CA, but not a name the API server's certificate has.
            self.metrics.refused.labels("client").inc()
            return web.Response(status=403, text="this client certificate is not the API server's")
        try:
            body = await read_body(request, self.limits)
        except BodyTimeout as e:
            self.metrics.refused.labels("body_timeout").inc()
            return web.Response(status=408, text=str(e), headers={"Connection": "close"})
        except web.HTTPRequestEntityTooLarge as e:
            self.metrics.refused.labels("body_size").inc()
            return web.Response(status=413, text=e.text, headers={"Connection": "close"})
        try:
            review = await self.parser.loads(body)
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

    async def authorize(self, request: web.Request) -> web.Response:
        """Deny every SubjectAccessReview: the API server's matchConditions send only the
        node agent's reads of other nodes' GPUDevices. `denied` (not just "not allowed")
        ends the API server's authorizer chain, so RBAC's cluster-wide list never
        applies to them; the reason tells the agent why."""
        if not client_allowed(request, self.client_names):
            self.metrics.refused.labels("client").inc()
            return web.Response(status=403, text="this client certificate is not the API server's")
        try:
            review = await self.parser.loads(await read_body(request, self.limits))
        except (orjson.JSONDecodeError, BodyTimeout):
            return web.Response(status=400, text="not a SubjectAccessReview")
        spec = review.get("spec") if isinstance(review, dict) else None
        spec = spec if isinstance(spec, dict) else {}
        nodes = (spec.get("extra") or {}).get(NODE_EXTRA) or [""]
        node = str(nodes[0]) if isinstance(nodes, list) and nodes else ""
        reason = (
            f"the node agent of {node} may read only that node's GPUDevices "
            f"(label gpu.cozystack.io/node={node}, names {node}-<pci address>)"
            if node
            else "the node agent's token names no node: it may read no GPUDevice"
        )
        self.metrics.refused.labels("agent_read").inc()
        answer = {
            "apiVersion": review.get("apiVersion", "authorization.k8s.io/v1")
            if isinstance(review, dict)
            else "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "status": {"allowed": False, "denied": True, "reason": reason},
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def readyz(self, request: web.Request) -> web.Response:
        if self.ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            for certs in (self.certs, *self.also_reload):
                try:
                    if certs.reload():
                        self.metrics.cert_reloads.inc()
                        log.info("reloaded the serving certificate")
                except (OSError, ssl.SSLError) as e:
                    # Mid-rotation the pair may not match yet: keep serving the old one.
                    log.warning("serving certificate not reloaded: %s", e)


async def _ok(request: web.Request) -> web.Response:
    return web.Response(text="ok")
