"""Informers: a kind's objects kept in step with the API server by list and watch.

Each informer lists (paged), then watches from the list's resourceVersion with bookmarks,
resuming from the last resourceVersion it saw when a watch ends. When that version has
expired (410 Gone) it lists again and diffs the new list against what it holds, handing on
a DELETED event for every object that vanished meanwhile, so no deletion is missed.

An informer may hold a selection of its kind: the objects a label selector matches (the
API server then sends an object relabelled out of it as DELETED) and, narrower still,
those its `selects` accepts; an object that stops being selected is handed on as DELETED
too. It may also list again every `resync` seconds, a safety net under the watch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Generic

from gpu_binder.api.kinds import T, resource_of
from gpu_binder.client.errors import Gone
from gpu_binder.client.interface import Client, WatchEvent

log = logging.getLogger(__name__)

Handler = Callable[[WatchEvent[Any]], None]


def object_key(obj: Any) -> str:
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


class Informer(Generic[T]):
    """One kind's cache; `handler` gets every change, relist diffs included, in order."""

    def __init__(
        self,
        client: Client,
        kind: type[T],
        handler: Handler,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        resync: float | None = None,
        backoff: float = 0.2,
        max_backoff: float = 10.0,
        on_relist: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.handler = handler
        self.namespace = namespace
        self.label_selector = label_selector
        # Seconds from one list to the next while the watch holds; None: only on 410 Gone.
        self.resync = resync
        self.store: dict[str, T] = {}
        # The last resourceVersion seen: a watch resumes from it; empty means list first.
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        # Failed lists or watches in a row: none since a watch last ran its course.
        self.failures = 0
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._on_relist = on_relist or (lambda: None)
        self._listed_at = 0.0

    @property
    def name(self) -> str:
        return resource_of(self.kind).plural

    def selects(self, obj: T) -> bool:
        """Whether the cache holds obj (the label selector aside); a subclass may narrow it."""
        return True

    async def run(self) -> None:
        """List and watch until cancelled; errors back off and retry, never end it."""
        delay = self._backoff
        while True:
            try:
                if not self.resource_version:
                    await self.relist()
                await self._watch_until_resync()
                delay = self._backoff
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except Gone as e:
                log.info("watch of %s expired (%s): relisting", self.name, e)
                self.resource_version = ""
            except Exception as e:
                self.failures += 1
                self._failed(e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)

    def _failed(self, error: Exception, delay: float) -> None:
        """Say why a list or watch failed; the next try is in `delay` seconds."""
        log.warning("informer %s: %r; retrying in %.1fs", self.name, error, delay)

    async def relist(self) -> None:
        """List everything and hand on the difference to what the store holds."""
        result = await self.client.list(
            self.kind, self.namespace, label_selector=self.label_selector
        )
        fresh = {object_key(o): o for o in result.items if self.selects(o)}
        for key, old in self.store.items():
            if key not in fresh:
                self._emit(WatchEvent("DELETED", old))
        for key, obj in fresh.items():
            was = self.store.get(key)
            if was is None:
                self._emit(WatchEvent("ADDED", obj))
            elif was.metadata.resource_version != obj.metadata.resource_version:
                self._emit(WatchEvent("MODIFIED", obj))
        self.store = fresh
        self.resource_version = result.resource_version
        self._listed_at = asyncio.get_running_loop().time()
        if self.synced.is_set():
            self.relists += 1
            self._on_relist()
        self.synced.set()

    async def _watch_until_resync(self) -> None:
        """One watch stream; with `resync`, cut short once the next list is due."""
        if self.resync is None:
            await self.watch()
            return
        window = asyncio.timeout_at(self._listed_at + self.resync)
        try:
            async with window:
                await self.watch()
        except TimeoutError:
            if not window.expired():
                raise
            self.resource_version = ""  # the resync: list again

    async def watch(self) -> None:
        """Follow one watch stream from resource_version until the server ends it."""
        stream = self.client.watch(
            self.kind, self.namespace, self.resource_version, label_selector=self.label_selector
        )
        try:
            async for event in stream:
                rv = event.object.metadata.resource_version
                if event.type != "BOOKMARK":
                    self._apply(event)
                if rv:
                    self.resource_version = rv
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _apply(self, event: WatchEvent[Any]) -> None:
        obj = event.object
        key = object_key(obj)
        if not self.selects(obj):
            # Out of the selection: the end of an object the store held, else nothing.
            if self.store.pop(key, None) is None:
                return
            event = WatchEvent("DELETED", obj)
        elif event.type == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        self._emit(event)

    def _emit(self, event: WatchEvent[Any]) -> None:
        try:
            self.handler(event)
        except Exception:
            # A handler bug must not stop the cache: the next event or resync repairs it.
            log.exception("informer %s: handler failed on %s", self.name, event.type)


class Informers:
    """The informers of several kinds, run together; synced once every one has listed."""

    def __init__(self, informers: Sequence[Informer[Any]]) -> None:
        self.informers = list(informers)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    async def wait_synced(self) -> None:
        for i in self.informers:
            await i.synced.wait()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in self.informers
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    @property
    def relists(self) -> int:
        return sum(i.relists for i in self.informers)
