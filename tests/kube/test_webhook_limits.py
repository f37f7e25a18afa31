"""The webhook server serves the API server only, and holds against callers that try to
wear it down (issue 11): a client certificate of its client CA required at the TLS
handshake, a name check, a body cap (413), a body timeout (408), an idle/header timeout,
a cap on connections, and big reviews of many values parsed in slices."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gpu_binder.cache import World
from gpu_binder.envtest import CertificateAuthority, free_port
from gpu_binder.kube.metrics import RunMetrics
from gpu_binder.kube.serving import Limits, Parser
from gpu_binder.kube.webhookserver import CertificateFiles, WebhookServer
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.webhook import Admitter
from gpu_binder.webhook.review import review_request

REVIEW = orjson.dumps(
    review_request({"metadata": {"name": "vmi", "namespace": "ns"}, "spec": {}}, uid="u-1")
)
LIMITS = Limits(
    max_body=256 * 1024,
    max_connections=3,
    handshake_timeout=1.0,
    idle_timeout=0.5,
    body_timeout=0.5,
)


@dataclass
class Served:
    server: WebhookServer
    ca: CertificateAuthority  # signs the serving certificate
    clients: CertificateAuthority  # the client CA: signs the API server's certificate
    port: int
    tmp: Path

    def context(self, client: CertificateAuthority | None = None, name: str = "") -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        if client is not None:
            client.issue_client(name or "kube-apiserver").write(self.tmp, f"client-{name}")
            ctx.load_cert_chain(self.tmp / f"client-{name}.crt", self.tmp / f"client-{name}.key")
        return ctx

    def api_server(self) -> ssl.SSLContext:
        return self.context(self.clients, "kube-apiserver")

    async def open(self, ctx: ssl.SSLContext) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=ctx)


async def post(served: Served, ctx: ssl.SSLContext, body: bytes, path: str = "/mutate") -> bytes:
    """One request on a new connection: the whole answer (status line, headers, body)."""
    reader, writer = await served.open(ctx)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    await writer.drain()
    try:
        return await reader.read()
    finally:
        writer.close()


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def start(tmp: Path, names: tuple[str, ...] = (), limits: Limits = LIMITS) -> Served:
    ca, clients = CertificateAuthority(), CertificateAuthority("api-server-client-ca")
    ca.issue_serving("webhook").write(tmp, "tls")
    (tmp / "client-ca.crt").write_bytes(clients.cert_pem)
    certs = CertificateFiles(tmp / "tls.crt", tmp / "tls.key", tmp / "client-ca.crt")
    port = free_port()
    server = WebhookServer(
        Admitter(World(), MemoryClient()),
        certs,
        RunMetrics(CollectorRegistry()),
        host="127.0.0.1",
        port=port,
        limits=limits,
        client_names=names,
    )
    await server.start()
    return Served(server, ca, clients, port, tmp)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    s = await start(tmp_path)
    yield s
    await s.server.stop()


# --- only the API server ---------------------------------------------------------------


async def test_the_api_servers_certificate_is_served(served: Served) -> None:
    answer = await post(served, served.api_server(), REVIEW)
    assert status(answer) == 200 and b'"allowed":true' in answer


async def test_without_a_client_certificate_the_handshake_is_refused(served: Served) -> None:
    # TLS 1.3: the client's half of the handshake ends before the server's alert, which
    # the first read then raises; no HTTP answer ever comes.
    with pytest.raises((ssl.SSLError, ConnectionError)):
        answer = await post(served, served.context(), REVIEW)
        assert answer == b"", answer  # closed without a byte of HTTP
        raise ConnectionError("closed")


async def test_a_certificate_of_another_ca_is_refused_at_the_handshake(served: Served) -> None:
    tenant = served.context(CertificateAuthority("cluster-ca"), "alice")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        answer = await post(served, tenant, REVIEW)
        assert answer == b"", answer
        raise ConnectionError("closed")


async def test_a_certificate_of_the_client_ca_with_a_name_not_listed_gets_403(
    tmp_path: Path,
) -> None:
    served = await start(tmp_path, names=("kube-apiserver",))
    try:
        other = served.context(served.clients, "someone-else")
        assert status(await post(served, other, REVIEW)) == 403
        assert status(await post(served, served.api_server(), REVIEW)) == 200
    finally:
        await served.server.stop()


# --- sizes and times -------------------------------------------------------------------


async def test_a_body_over_the_cap_gets_413_before_it_is_read(served: Served) -> None:
    reader, writer = await served.open(served.api_server())
    length = LIMITS.max_body + 1
    writer.write(f"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert status(answer) == 413


async def test_a_chunked_body_growing_past_the_cap_gets_413(served: Served) -> None:
    reader, writer = await served.open(served.api_server())
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"x" * 65536
    for _ in range(LIMITS.max_body // len(chunk) + 2):
        writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert status(answer) == 413


async def test_an_unfinished_body_is_cut_after_the_body_timeout(served: Served) -> None:
    reader, writer = await served.open(served.api_server())
    writer.write(b'POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"a":')
    await writer.drain()
    # The answer, then the connection closed (after a second of lingering).
    answer = await asyncio.wait_for(reader.read(), LIMITS.body_timeout + 5)
    writer.close()
    assert status(answer) == 408
    assert served.server.metrics.refused.labels("body_timeout")._value.get() == 1


async def test_headers_never_finished_are_cut_after_the_idle_timeout(served: Served) -> None:
    reader, writer = await served.open(served.api_server())
    writer.write(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")  # and no more
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), LIMITS.idle_timeout + 5)
    writer.close()
    assert answer == b""  # closed, nothing answered


async def test_the_connection_past_the_cap_is_closed_and_a_freed_place_is_served(
    served: Served,
) -> None:
    idle = [await served.open(served.api_server()) for _ in range(LIMITS.max_connections)]
    reader, writer = await served.open(served.api_server())
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed after its handshake
    writer.close()
    assert served.server.metrics.refused.labels("connections")._value.get() == 1
    _, first = idle.pop()
    first.close()
    await first.wait_closed()
    async with asyncio.timeout(5):
        while served.server.connections.open >= LIMITS.max_connections:
            await asyncio.sleep(0.01)
    assert status(await post(served, served.api_server(), REVIEW)) == 200
    for _, w in idle:
        w.close()


# --- parsing ---------------------------------------------------------------------------


def many_values(n: int) -> bytes:
    vmi = {
        "metadata": {"name": "big", "namespace": "ns"},
        "spec": {"domain": {"devices": {"disks": [{"name": f"d{i}"} for i in range(n)]}}},
    }
    return orjson.dumps(review_request(vmi, uid="big"))


async def test_a_body_of_many_values_is_parsed_in_slices_to_the_same_value() -> None:
    parser = Parser()
    body = many_values(30_000)
    assert await parser.loads(body) == orjson.loads(body)
    assert parser.sliced == 1


async def test_a_big_body_of_few_values_is_parsed_at_once() -> None:
    # A cloud-init script of a megabyte is one string: cheap to parse, never sliced.
    parser = Parser()
    body = orjson.dumps({"userData": "#!/bin/sh\n" + "echo x\n" * 150_000})
    assert await parser.loads(body) == orjson.loads(body)
    assert parser.sliced == 0


async def test_a_malformed_sliced_body_is_a_json_error() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        await Parser().loads(many_values(30_000)[:-10])


async def test_a_small_review_is_answered_while_a_big_one_is_being_parsed(
    tmp_path: Path,
) -> None:
    served = await start(tmp_path, limits=Limits(max_body=4 * 1024 * 1024, body_timeout=30))
    served.server.parser = Parser(slice_bytes=4096)
    try:
        big = asyncio.create_task(post(served, served.api_server(), many_values(40_000)))
        while served.server.parser.sliced == 0:
            await asyncio.sleep(0.001)
        small = await post(served, served.api_server(), REVIEW)
        assert status(small) == 200
        assert not big.done(), "the small review waited for the big one"
        assert status(await big) == 200
    finally:
        await served.server.stop()


# --- the node agent's reads ------------------------------------------------------------


async def test_authorize_denies_what_the_api_server_sends_it_saying_why(served: Served) -> None:
    # Only the agent's reads beyond its node are sent (the API server's matchConditions);
    # "denied" ends the authorizer chain, so RBAC's cluster-wide list never applies.
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "system:serviceaccount:gpu-binder:gpu-binder-agent",
            "extra": {"authentication.kubernetes.io/node-name": ["node-a"]},
            "resourceAttributes": {"verb": "list", "resource": "gpudevices"},
        },
    }
    answer = await post(served, served.api_server(), orjson.dumps(review), "/authorize")
    assert status(answer) == 200
    body = orjson.loads(answer.split(b"\r\n\r\n", 1)[1])
    assert body["status"]["allowed"] is False and body["status"]["denied"] is True
    assert (
        "the node agent of node-a may read only that node's GPUDevices" in body["status"]["reason"]
    )


async def test_authorize_answers_only_the_api_server(served: Served) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        answer = await post(served, served.context(), b"{}", "/authorize")
        assert answer == b"", answer
        raise ConnectionError("closed")
