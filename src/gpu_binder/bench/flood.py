"""`gpu-binder bench flood`: other reviews' latency while one client floods the webhook.

The webhook server runs in this process as `gpu-binder run` serves it (client CA, limits),
on an embedded world; a "victim" client with the API server's certificate sends small VMI
reviews one after another on a kept-alive connection and its latencies are recorded,
first on a quiet server, then under each flood, which runs in a process of its own (its
client work must not share the server's event loop):

- `handshakes`: a client without a certificate opening TLS connections as fast as it can
  (each refused at the handshake), plus TCP connections that never start one;
- `big_reviews`: the API server itself forwarding reviews of many JSON values (a tenant's
  pathological 3 MiB object), several at once; once parsed in slices (the server's way),
  once parsed at once (what the server did before, for comparison).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import ssl
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client import CollectorRegistry

from gpu_binder.cache import World
from gpu_binder.envtest import CertificateAuthority, free_port
from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.kube.serving import INLINE_BYTES, Limits, Parser
from gpu_binder.kube.webhookserver import CertificateFiles, WebhookServer
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook import Admitter
from gpu_binder.webhook.review import review_request

CLIENT = "kube-apiserver-webhook-client"


def _review(uid: str, disks: int = 4) -> bytes:
    vmi = {
        "metadata": {"name": f"vm-{uid}", "namespace": "tenant", "labels": {"app": "x"}},
        "spec": {"domain": {"devices": {"disks": [{"name": f"d{i}"} for i in range(disks)]}}},
    }
    return orjson.dumps(review_request(vmi, uid=uid))


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 1),
        "p99_ms": round(p99 * 1e3, 1),
        "max_ms": round(ordered[-1] * 1e3, 1),
        "samples": len(ordered),
    }


@dataclass
class Setup:
    server: WebhookServer
    url: str
    trusted: ssl.SSLContext  # trusts the serving CA, presents the API server's certificate
    target: Target


async def _setup(work: Path) -> Setup:
    ca, clients = CertificateAuthority(), CertificateAuthority("client-ca")
    ca.issue_serving("webhook").write(work, "tls")
    (work / "client-ca.crt").write_bytes(clients.cert_pem)
    clients.issue_client(CLIENT).write(work, "client")
    port = free_port()
    server = WebhookServer(
        Admitter(World(), MemoryClient()),
        CertificateFiles(work / "tls.crt", work / "tls.key", work / "client-ca.crt"),
        RunMetrics(CollectorRegistry()),
        host="127.0.0.1",
        port=port,
        limits=Limits(),
        client_names=(CLIENT,),
    )
    await server.start()
    url = f"https://127.0.0.1:{port}/mutate"
    target = Target(port, url, ca.cert_pem, work / "client.crt", work / "client.key")
    return Setup(server, url, target.trusted(), target)


async def _victim(s: Setup, samples: int) -> list[float]:
    out: list[float] = []
    connector = aiohttp.TCPConnector(ssl=s.trusted, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for i in range(samples):
            body = _review(f"v{i}")
            t = time.perf_counter()
            async with session.post(s.url, data=body) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            out.append(time.perf_counter() - t)
            await asyncio.sleep(0.005)
    return out


@dataclass(frozen=True)
class Target:
    """What a flood process needs to reach the server (picklable)."""

    port: int
    url: str
    ca_pem: bytes
    client_cert: Path
    client_key: Path

    def trusted(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def anonymous(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca_pem.decode())


def _flood_process(name: str, target: Target, stop: Any, result: Any) -> None:
    flood = FLOODS[name]

    async def run() -> int:
        done = asyncio.Event()

        async def watch() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.05)
            done.set()

        watcher = asyncio.create_task(watch())
        count = await flood(target, done)
        await watcher
        return count

    result.put(asyncio.run(run()))


async def _handshakes(s: Target, stop: asyncio.Event) -> int:
    """Connections without a certificate, and TCP connections left without a handshake."""
    idle = [await asyncio.open_connection("127.0.0.1", s.port) for _ in range(200)]
    tries = 0

    async def one() -> None:
        nonlocal tries
        while not stop.is_set():
            tries += 1
            with contextlib.suppress(ssl.SSLError, OSError, asyncio.IncompleteReadError):
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", s.port, ssl=s.anonymous()
                )
                writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                await reader.read()
                writer.close()

    await asyncio.gather(*(one() for _ in range(8)))
    for _, w in idle:
        w.close()
    return tries


async def _big_reviews(s: Target, stop: asyncio.Event) -> int:
    body = _review("big", disks=150_000)  # about 3 MiB of small objects
    sent = 0

    async def one() -> None:
        nonlocal sent
        connector = aiohttp.TCPConnector(ssl=s.trusted(), limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not stop.is_set():
                async with session.post(s.url, data=body) as resp:
                    await resp.read()
                sent += 1

    await asyncio.gather(*(one() for _ in range(4)))
    return sent


FLOODS: dict[str, Callable[[Target, asyncio.Event], Awaitable[int]]] = {
    "handshakes": _handshakes,
    "big_reviews": _big_reviews,
}


async def _under(s: Setup, samples: int, flood: str | None, settle: float) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    process = None
    ctx = multiprocessing.get_context("spawn")
    stop, result = ctx.Event(), ctx.Queue()
    if flood is not None:
        process = ctx.Process(target=_flood_process, args=(flood, s.target, stop, result))
        process.start()
        await asyncio.sleep(settle)  # the child started and its flood under way
        if flood == "big_reviews":
            # Its clients hold established connections (the victim has none yet).
            async with asyncio.timeout(60):
                while s.server.connections.open == 0:
                    await asyncio.sleep(0.05)
    try:
        figures["victim"] = _stats(await _victim(s, samples))
    finally:
        stop.set()
    if process is not None:
        loop = asyncio.get_running_loop()
        figures["flood_requests"] = await loop.run_in_executor(None, result.get, True, 60)
        await loop.run_in_executor(None, process.join, 30)
    return figures


SCENARIOS = ("quiet", "handshakes", "big_reviews_sliced", "big_reviews_at_once")


async def run(
    samples: int, scenarios: tuple[str, ...] = SCENARIOS, settle: float = 3.0
) -> dict[str, Any]:
    """The victim's figures under each scenario, and what the server refused."""
    with tempfile.TemporaryDirectory(prefix="gpu-binder-flood-") as work:
        s = await _setup(Path(work))
        try:
            out: dict[str, Any] = {}
            for name in scenarios:
                if name == "big_reviews_at_once":
                    # What the server did before: every body parsed at once, on the loop.
                    s.server.parser = _AtOnce()
                flood = (
                    None
                    if name == "quiet"
                    else name.removesuffix("_sliced").removesuffix("_at_once")
                )
                out[name] = await _under(s, samples, flood, settle)
                if name == "big_reviews_sliced":
                    out[name]["sliced_parses"] = s.server.parser.sliced
            out["refused"] = {
                reason: s.server.metrics.refused.labels(reason)._value.get()
                for reason in ("connections", "client", "body_timeout", "body_size")
            }
            return out
        finally:
            await s.server.stop()


class _AtOnce(Parser):
    async def loads(self, body: bytes) -> Any:
        return orjson.loads(body)


def main(samples: int = 300) -> dict[str, Any]:
    figures = asyncio.run(run(samples))
    figures["inline_bytes"] = INLINE_BYTES
    return figures
