"""What the webhook's HTTPS server holds against callers that are not the API server, or
that try to wear it down (issue 11): client certificates, connection and time limits,
a body cap, and parsing of big reviews in slices.

- **Client certificates.** With a client CA the TLS handshake requires a certificate it
  signed: anything but the API server (its AdmissionConfiguration kubeconfig names the
  certificate it presents) is refused before a byte of HTTP. `names` narrows it further
  to certificates whose common name or DNS names are listed, for a CA that signs more
  than the API server's certificate.
- **Time.** A connection must complete its TLS handshake within `handshake_timeout` and
  send a request's headers within `idle_timeout` of connecting or of its last response
  (aiohttp's keep-alive timer closes a connection whose request has not arrived whole);
  a request's body must arrive within `body_timeout`.
- **Connections.** At most `max_connections` established at once; one more is closed as
  soon as its handshake completes. Connections still in their handshake are bounded by
  the handshake timeout and the listen backlog.
- **Size.** A body over `max_body` is refused with 413 before it is read (by its
  Content-Length) or as soon as it grows past it (chunked): the API server sends at most
  its own request limit, 3 MiB, plus the review's envelope.
- **Parsing.** orjson holds the GIL for a whole document, so a thread would not free the
  event loop: a body of many JSON values (a pathological 3 MiB review takes hundreds of
  milliseconds) is parsed by ijson in slices, one such body at a time, yielding to other
  reviews between slices. Small bodies, and big ones of few values (a cloud-init string),
  are parsed at once by orjson.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ijson
import orjson
from aiohttp import web

MIB = 1024 * 1024
# Parsed at once below this size; above it, only when the body has few values.
INLINE_BYTES = 256 * 1024
INLINE_VALUES = 20_000
SLICE_BYTES = 4 * 1024


@dataclass(frozen=True)
class Limits:
    max_body: int = 3 * MIB + 64 * 1024
    max_connections: int = 256
    handshake_timeout: float = 5.0
    idle_timeout: float = 15.0
    body_timeout: float = 10.0


class BodyTimeout(Exception):
    """The request's body did not arrive in time."""


async def read_body(request: web.Request, limits: Limits) -> bytes:
    """The body, within limits.body_timeout and limits.max_body (else 413, raised)."""
    if request.content_length is not None and request.content_length > limits.max_body:
        raise web.HTTPRequestEntityTooLarge(
            max_size=limits.max_body, actual_size=request.content_length
        )
    try:
        async with asyncio.timeout(limits.body_timeout):
            return await request.read()  # past client_max_size: HTTPRequestEntityTooLarge
    except TimeoutError:
        raise BodyTimeout(f"the body did not arrive within {limits.body_timeout:g}s") from None


class Parser:
    """JSON bodies into Python values without holding the event loop for long."""

    def __init__(self, slice_bytes: int = SLICE_BYTES) -> None:
        self.slice_bytes = slice_bytes
        # One sliced parse at a time: a flood of big bodies queues here, and each small
        # review waits for at most one slice.
        self._heavy = asyncio.Semaphore(1)
        self.sliced = 0

    async def loads(self, body: bytes) -> Any:
        if len(body) <= INLINE_BYTES or _values(body) <= INLINE_VALUES:
            return orjson.loads(body)
        async with self._heavy:
            self.sliced += 1
            return await self._sliced(body)

    async def _sliced(self, body: bytes) -> Any:
        found: list[Any] = []
        sink = _Sink(found)
        coro = ijson.items_coro(sink, "", use_float=True)
        try:
            for start in range(0, len(body), self.slice_bytes):
                coro.send(body[start : start + self.slice_bytes])
                await asyncio.sleep(0)
            coro.close()
        except ijson.JSONError as e:
            raise orjson.JSONDecodeError(str(e), body[:64].decode(errors="replace"), 0) from None
        if len(found) != 1:
            raise orjson.JSONDecodeError("not one JSON document", "", 0)
        return found[0]


class _Sink:
    def __init__(self, found: list[Any]) -> None:
        self.found = found

    def send(self, value: Any) -> None:
        self.found.append(value)


def _values(body: bytes) -> int:
    """An upper bound of the body's JSON values (separators in strings count too)."""
    return body.count(b",") + body.count(b"{") + body.count(b"[")


# --- client certificates ---------------------------------------------------------------


def peer_names(request: web.Request) -> set[str]:
    """The common name and DNS names of the verified client certificate, if any."""
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    if not cert:
        return set()
    names = {v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"}
    names.update(v for k, v in cert.get("subjectAltName", ()) if k == "DNS")
    return names


def client_allowed(request: web.Request, names: Sequence[str]) -> bool:
    return not names or bool(peer_names(request) & set(names))


# --- connections -------------------------------------------------------------------------


class Connections:
    """Counts established connections and closes those past the cap."""

    def __init__(self, cap: int, refused: Callable[[], None] = lambda: None) -> None:
        self.cap = cap
        self.open = 0
        self.refused = refused

    def protocol(self, make: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        def factory() -> asyncio.Protocol:
            return _Capped(self, make())

        return factory


class _Capped(asyncio.Protocol):
    """aiohttp's protocol behind a gate: it sees the connection only if under the cap.
    With TLS, connection_made comes after the handshake, so only connections that
    completed it count."""

    def __init__(self, gate: Connections, inner: asyncio.Protocol) -> None:
        self.gate = gate
        self.inner = inner
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.gate.open >= self.gate.cap:
            self.gate.refused()
            if isinstance(transport, asyncio.Transport):
                transport.abort()
            else:
                transport.close()
            return
        self.gate.open += 1
        self.admitted = True
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.gate.open -= 1
            self.admitted = False
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


async def serve(
    runner: web.BaseRunner,
    host: str,
    port: int,
    context: ssl.SSLContext,
    limits: Limits,
    connections: Connections,
) -> asyncio.Server:
    """Listen with runner's handler behind the connection cap and handshake timeout (what
    aiohttp's TCPSite cannot set)."""
    assert runner.server is not None, "runner.setup() first"
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        connections.protocol(runner.server),
        host,
        port,
        ssl=context,
        ssl_handshake_timeout=limits.handshake_timeout,
        reuse_address=True,
        backlog=128,
    )
