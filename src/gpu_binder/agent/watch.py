"""What the agent reads from the API server, kept by list and watch instead of polling.

A `Watched` keeps one kind's objects (its node's GPUDevices through the node label, or
every GPUClass) the way an informer does: it lists, then watches from the list's
resourceVersion, resuming when a stream ends and listing again when the version has
expired, after an error, and every `resync` seconds as a safety net. Every change the
agent did not make itself calls `on_change`, which wakes a pass, so a GPU entering
Cleaning is reset at once rather than at the next rescan.

The agent's own writes are "expected" (a controller's expectations): the events they
cause wake nothing, and a pass reads the store only once it holds them, so it never
plans from a version older than the one it wrote. While the store cannot be trusted
(not listed yet, a watch failing, expectations overdue) `fresh` is false and the agent
lists instead, as it did before it watched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Generic

from gpu_binder.api.kinds import T, resource_of
from gpu_binder.client.errors import Gone
from gpu_binder.client.interface import Client, WatchEvent

log = logging.getLogger(__name__)

# A deletion the agent made: the next event of the object (DELETED, or MODIFIED with a
# deletionTimestamp while a finalizer holds it) is its own.
DELETION = ""


class Watched(Generic[T]):
    """The objects of one kind that `label_selector` and `keep` select, by list and watch."""

    def __init__(
        self,
        client: Client,
        kind: type[T],
        on_change: Callable[[], None],
        *,
        label_selector: str | None = None,
        keep: Callable[[T], bool] = lambda _: True,
        resync: float = 300.0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        self.client = client
        self.kind = kind
        self.on_change = on_change
        self.label_selector = label_selector
        self.keep = keep
        self.resync = resync
        self.store: dict[str, T] = {}
        self.resource_version = ""
        # True from a list until a watch fails: the store follows the API server.
        self.live = False
        self.lists = 0
        self._backoff = backoff
        self._max_backoff = max_backoff
        # name → the resourceVersion a write of the agent returned (DELETION for a delete).
        self._expected: dict[str, str] = {}
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._last_error = ""

    @property
    def name(self) -> str:
        return resource_of(self.kind).plural

    def items(self) -> list[T]:
        return sorted(self.store.values(), key=lambda o: o.metadata.name)

    @property
    def fresh(self) -> bool:
        """Whether a pass may read the store: live, and holding every write it expects."""
        return self.live and self._caught_up.is_set()

    def expect(self, name: str, written: T | None) -> None:
        """Note one write of the agent (None: a delete): its event is no change to react to."""
        if written is None:
            self._expected[name] = DELETION
        else:
            rv = written.metadata.resource_version
            held = self.store.get(name)
            if held is not None and held.metadata.resource_version == rv:
                return  # its event came first (or the write changed nothing)
            self._expected[name] = rv
        self._caught_up.clear()

    async def wait_fresh(self, timeout: float) -> bool:
        """Until the store holds the agent's writes; False when not live or overdue."""
        if not self.live:
            return False
        try:
            await asyncio.wait_for(self._caught_up.wait(), timeout)
        except TimeoutError:
            log.info(
                "%s: the watch has not shown %d of the agent's writes after %.0fs; listing",
                self.name,
                len(self._expected),
                timeout,
            )
            self._forget_expected()
            return False
        return self.live

    async def run(self) -> None:
        """List and watch until cancelled; errors back off and list again, never end it."""
        loop = asyncio.get_running_loop()
        delay = self._backoff
        while True:
            try:
                await self.relist()
                delay = self._backoff
                self._last_error = ""
                window = asyncio.timeout_at(loop.time() + self.resync)
                try:
                    async with window:
                        while True:  # a stream the server ended resumes where it was
                            await self.watch()
                except TimeoutError:
                    if not window.expired():
                        raise
                    # The resync: list again.
            except asyncio.CancelledError:
                raise
            except Gone as e:
                log.info("watch of %s expired (%s): listing again", self.name, e)
            except Exception as e:
                self.live = False
                error = f"{type(e).__name__}: {getattr(e, 'message', None) or e}"
                # Said once, not at every retry of the same failure.
                level = logging.DEBUG if error == self._last_error else logging.WARNING
                log.log(
                    level, "watch of %s failed (%s); listing each pass meanwhile", self.name, error
                )
                self._last_error = error
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_backoff)

    async def relist(self) -> None:
        """List, replace the store, and wake a pass when the list differs from it."""
        result = await self.client.list(self.kind, label_selector=self.label_selector)
        fresh = {o.metadata.name: o for o in result.items if self.keep(o)}
        changed = _versions(fresh) != _versions(self.store)
        self.store = fresh
        self.resource_version = result.resource_version
        self.lists += 1
        # A list made after the agent's writes returned holds them (or what came after).
        self._forget_expected()
        self.live = True
        # The first list tells nothing the agent's first pass does not read itself.
        if changed and self.lists > 1:
            self.on_change()

    async def watch(self) -> None:
        """Follow one watch stream from resource_version until the server ends it."""
        stream = self.client.watch(
            self.kind,
            resource_version=self.resource_version,
            label_selector=self.label_selector,
        )
        try:
            async for event in stream:
                if event.type != "BOOKMARK":
                    self._apply(event)
                rv = event.object.metadata.resource_version
                if rv:
                    self.resource_version = rv
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _apply(self, event: WatchEvent[Any]) -> None:
        obj = event.object
        meta = obj.metadata
        if event.type == "DELETED" or not self.keep(obj):
            known = self.store.pop(meta.name, None) is not None
        else:
            known = True
            self.store[meta.name] = obj
        own = self._own(event)
        if known and not own:
            self.on_change()

    def _own(self, event: WatchEvent[Any]) -> bool:
        meta = event.object.metadata
        expected = self._expected.get(meta.name)
        if expected is None:
            return False
        if expected == DELETION:
            own = event.type == "DELETED" or meta.deletion_timestamp is not None
        else:
            own = meta.resource_version == expected
        if own:
            del self._expected[meta.name]
            if not self._expected:
                self._caught_up.set()
        return own

    def _forget_expected(self) -> None:
        self._expected.clear()
        self._caught_up.set()


def _versions(objects: dict[str, Any]) -> dict[str, str]:
    return {name: o.metadata.resource_version for name, o in objects.items()}
