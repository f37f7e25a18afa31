"""KubeClient: the Client protocol against a real API server, over one aiohttp session.

Bodies are parsed once with orjson straight into the typed models; lists are paged
(limit/continue); errors become gpu_binder.client.errors types; watches ask for bookmarks
and raise Gone when their resourceVersion has expired, so an informer relists.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import aiohttp
import orjson

from gpu_binder.api.kinds import Resource, T, parse, resource_of
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.client.errors import ApiError, Gone, from_status
from gpu_binder.client.interface import Client, ListResult, WatchEvent
from gpu_binder.kube.config import AuthHeaders, Connection

log = logging.getLogger(__name__)

FIELD_MANAGER = "gpu-binder"
PAGE_SIZE = 500
# The API server ends a watch after this long (jittered, as client-go does), and the
# caller resumes it from the last resourceVersion.
WATCH_SECONDS = 300
# Retries of a read answered 429/503 (an apiserver starting, or priority-and-fairness).
READ_RETRIES = 3
# Connections for requests (watches have their own): twice the reconciler's writes in
# flight (binder.reconciler WRITES_IN_FLIGHT), so that a burst of writes leaves as many
# for the webhook's reads and the events. With the two equal and the watches in the same
# pool, bench start at 500 x 1,000 had 17,759 requests wait for a connection, p99 2 s and
# up to 17 s: the launcher pods the pod webhook failed to answer within 10 s.
POOL = 128
# A sibling's (the lease's): one renewal at a time, and a spare.
LEASE_POOL = 2
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class Bookmark:
    """A watch bookmark: only a resourceVersion to resume from, no object."""

    __slots__ = ("metadata",)

    def __init__(self, resource_version: str) -> None:
        self.metadata = ObjectMeta(name="", resource_version=resource_version)

    def to_dict(self) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": self.metadata.resource_version}}


class KubeClient:
    """The API's verbs over typed objects, as `impersonate` when given (user, groups)."""

    def __init__(
        self,
        connection: Connection,
        *,
        impersonate: tuple[str, tuple[str, ...]] | None = None,
        page_size: int = PAGE_SIZE,
        timeout: float = 30.0,
        pool: int = POOL,
    ) -> None:
        self.server = connection.server
        self._ssl = connection.ssl
        self._auth: AuthHeaders | None = connection.auth
        self.page_size = page_size
        self.timeout = timeout
        self._pool = pool
        self._headers: dict[str, str] = {"Accept": JSON, "User-Agent": "gpu-binder"}
        self._impersonate = impersonate
        self._session: aiohttp.ClientSession | None = None
        # Watches hold a connection for minutes each: on a pool of their own, without a
        # limit (one per watched kind), they neither take the requests' connections nor
        # wait for one behind a burst of writes (a watch re-established late is a cache
        # that lags).
        self._streams: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        for session in (self._session, self._streams):
            if session is not None:
                await session.close()
        self._session = self._streams = None

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the Client protocol ----------------------------------------------------------

    async def get(self, kind: type[T], name: str, namespace: str = "") -> T:
        res = resource_of(kind)
        return parse(kind, await self.request("GET", path(res, namespace, name)))

    async def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> ListResult[T]:
        res = resource_of(kind)
        items: builtins.list[T] = []
        query: dict[str, str] = {"limit": str(self.page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        while True:
            try:
                page = await self.request("GET", path(res, namespace or ""), query=query)
            except Gone:
                # The continue token expired mid-list: one unpaged list is consistent.
                log.info("list of %s: continue token expired, listing unpaged", res.plural)
                items.clear()
                query = {k: v for k, v in query.items() if k == "labelSelector"}
                page = await self.request("GET", path(res, namespace or ""), query=query)
            items.extend(parse(kind, _with_kind(raw, res)) for raw in page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return ListResult(items=items, resource_version=str(meta["resourceVersion"]))
            query["continue"] = token

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent[T]]:
        return self._watch(kind, namespace, resource_version, label_selector)

    async def create(self, obj: T, dry_run: bool = False) -> T:
        res = resource_of(type(obj))
        query = {"dryRun": "All"} if dry_run else None
        body = _body(obj, res)
        raw = await self.request("POST", path(res, obj.metadata.namespace), body, query=query)
        return parse(type(obj), raw)

    async def update(self, obj: T) -> T:
        res = resource_of(type(obj))
        meta = obj.metadata
        raw = await self.request("PUT", path(res, meta.namespace, meta.name), _body(obj, res))
        return parse(type(obj), raw)

    async def update_status(self, obj: T) -> T:
        res = resource_of(type(obj))
        meta = obj.metadata
        sub = "status" if res.status_subresource else ""
        raw = await self.request("PUT", path(res, meta.namespace, meta.name, sub), _body(obj, res))
        return parse(type(obj), raw)

    async def patch(self, kind: type[T], name: str, namespace: str, patch: dict[str, Any]) -> T:
        res = resource_of(kind)
        raw = await self.request(
            "PATCH", path(res, namespace, name), patch, content_type=MERGE_PATCH
        )
        return parse(kind, raw)

    async def patch_status(
        self, kind: type[T], name: str, namespace: str, patch: dict[str, Any]
    ) -> T:
        """A JSON merge patch of the status subresource (not in the Client protocol)."""
        res = resource_of(kind)
        raw = await self.request(
            "PATCH", path(res, namespace, name, "status"), patch, content_type=MERGE_PATCH
        )
        return parse(kind, raw)

    async def set_condition(
        self, kind: type[T], name: str, namespace: str, condition: dict[str, Any]
    ) -> T:
        res = resource_of(kind)
        patch = {"status": {"conditions": [condition]}}
        raw = await self.request(
            "PATCH", path(res, namespace, name, "status"), patch, content_type=STRATEGIC_PATCH
        )
        return parse(kind, raw)

    async def apply(
        self, kind: type[T], obj: dict[str, Any], field_manager: str = FIELD_MANAGER
    ) -> T:
        res = resource_of(kind)
        meta = obj.get("metadata") or {}
        body = {"apiVersion": res.api_version, "kind": res.kind, **obj}
        raw = await self.request(
            "PATCH",
            path(res, str(meta.get("namespace") or ""), str(meta["name"])),
            body,
            query={"fieldManager": field_manager, "force": "true"},
            content_type=APPLY_PATCH,
        )
        return parse(kind, raw)

    async def delete(self, kind: type[T], name: str, namespace: str = "") -> None:
        await self.request("DELETE", path(resource_of(kind), namespace, name))

    # --- raw requests -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        url_path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = JSON,
    ) -> dict[str, Any]:
        """One request; the answer's JSON object, or the typed error of its Status."""
        data = None if body is None else orjson.dumps(body)
        for attempt in range(READ_RETRIES + 1):
            try:
                async with self._send(method, url_path, data, query, content_type) as resp:
                    payload = await resp.read()
                    if resp.status < 300:
                        return cast(dict[str, Any], orjson.loads(payload)) if payload else {}
                    retry = _retry_after(resp)
                    if method == "GET" and retry is not None and attempt < READ_RETRIES:
                        await asyncio.sleep(retry)
                        continue
                    raise _error(resp.status, payload)
            except aiohttp.ClientError as e:
                err = ApiError(f"{method} {url_path}: {type(e).__name__}: {e}")
                err.code = 503
                raise err from e
        raise AssertionError("unreachable")

    @asynccontextmanager
    async def _send(
        self,
        method: str,
        url_path: str,
        data: bytes | None,
        query: Mapping[str, str] | None,
        content_type: str,
        timeout: aiohttp.ClientTimeout | None = None,
        *,
        stream: bool = False,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        headers = list(self._headers.items())
        if data is not None:
            headers.append(("Content-Type", content_type))
        if self._auth is not None:
            headers.extend((await self._auth()).items())
        if self._impersonate is not None:
            user, groups = self._impersonate
            headers.append(("Impersonate-User", user))
            # The header repeats, once per group.
            headers.extend(("Impersonate-Group", g) for g in groups)
        kwargs: dict[str, Any] = {"data": data, "params": query, "headers": headers}
        if timeout is not None:
            kwargs["timeout"] = timeout
        session = self._streams_session() if stream else self._session_for()
        async with session.request(method, self.server + url_path, **kwargs) as resp:
            yield resp

    def _session_for(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._pool),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._session

    def _streams_session(self) -> aiohttp.ClientSession:
        if self._streams is None:
            self._streams = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
        return self._streams

    def sibling(self) -> KubeClient:
        """A client of the same server and identity with connections of its own, for
        requests that must not wait behind this one's (the lease's renewals)."""
        return KubeClient(
            Connection(self.server, self._ssl, self._auth),
            impersonate=self._impersonate,
            page_size=self.page_size,
            timeout=self.timeout,
            pool=LEASE_POOL,
        )

    async def _watch(
        self,
        kind: type[T],
        namespace: str | None,
        resource_version: str | None,
        label_selector: str | None,
    ) -> AsyncIterator[WatchEvent[T]]:
        res = resource_of(kind)
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        if resource_version:
            query["resourceVersion"] = resource_version
        if label_selector:
            query["labelSelector"] = label_selector
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_SECONDS + 30)
        req = self._send("GET", path(res, namespace or ""), None, query, JSON, timeout, stream=True)
        try:
            async with req as resp:
                if resp.status >= 300:
                    raise _error(resp.status, await resp.read())
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = orjson.loads(line)
                    type_, raw = event.get("type"), event.get("object") or {}
                    if type_ == "ERROR":
                        raise _error(int(raw.get("code") or 500), orjson.dumps(raw))
                    if type_ == "BOOKMARK":
                        rv = str((raw.get("metadata") or {}).get("resourceVersion", ""))
                        yield WatchEvent("BOOKMARK", cast(T, Bookmark(rv)))
                        continue
                    yield WatchEvent(type_, parse(kind, _with_kind(raw, res)))
        except aiohttp.ClientPayloadError:
            return  # the server closed the stream mid-event: the caller resumes
        except aiohttp.ClientError as e:
            err = ApiError(f"watch {res.plural}: {type(e).__name__}: {e}")
            err.code = 503
            raise err from e


def path(res: Resource, namespace: str, name: str = "", sub: str = "") -> str:
    """The REST path of a kind's collection, an object, or an object's subresource."""
    base = f"/apis/{res.api_version}" if res.group else f"/api/{res.api_version}"
    if res.namespaced and namespace:
        base += f"/namespaces/{namespace}"
    base += f"/{res.plural}"
    if name:
        base += f"/{name}"
    if sub:
        base += f"/{sub}"
    return base


def _body(obj: Any, res: Resource) -> dict[str, Any]:
    body = cast(dict[str, Any], obj.to_dict())
    body.setdefault("apiVersion", res.api_version)
    body.setdefault("kind", res.kind)
    meta = body.get("metadata") or {}
    # Empty server-set fields would be read as values; the API server fills them in.
    for key in ("uid", "resourceVersion", "creationTimestamp", "namespace"):
        if meta.get(key) in ("", None):
            meta.pop(key, None)
    if meta.get("generation") == 0:
        meta.pop("generation", None)
    return body


def _with_kind(raw: dict[str, Any], res: Resource) -> dict[str, Any]:
    """List items carry no apiVersion and kind; the typed models expect them."""
    if "kind" not in raw:
        raw["kind"] = res.kind
        raw["apiVersion"] = res.api_version
    return raw


def _error(code: int, payload: bytes) -> ApiError:
    message, reason = payload.decode(errors="replace")[:2000], ""
    try:
        status = orjson.loads(payload)
    except orjson.JSONDecodeError:
        status = None
    if isinstance(status, dict):
        message = str(status.get("message") or message)
        reason = str(status.get("reason") or "")
    err = from_status(code, message, reason)
    err.reason = reason or err.reason
    return err


def _retry_after(resp: aiohttp.ClientResponse) -> float | None:
    if resp.status not in (429, 503):
        return None
    try:
        return min(float(resp.headers.get("Retry-After", "1")), 2.0)
    except ValueError:
        return 1.0


if TYPE_CHECKING:
    _conforms: Client = cast(KubeClient, None)
