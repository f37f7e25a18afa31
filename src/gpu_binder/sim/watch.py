"""A kind's bounded event history and the watch streams that follow it, whole or by label."""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from gpu_binder.client.errors import Gone
from gpu_binder.client.interface import WatchEvent


class Watcher:
    """One watch stream: events of one kind, optionally one namespace, in write order."""

    def __init__(self, namespace: str | None, backlog: list[WatchEvent[Any]], limit: int) -> None:
        self._namespace = namespace or None
        self._queue: deque[WatchEvent[Any]] = deque(backlog)
        self._limit = limit
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None
        self._closed = False

    def push(self, event: WatchEvent[Any]) -> None:
        if self._closed or self._error is not None:
            return
        if self._namespace is not None and event.object.metadata.namespace != self._namespace:
            return
        self._queue.append(event)
        if len(self._queue) > self._limit:
            # A reader this far behind could not resume from the history either.
            self.fail(Gone("watch reader fell behind the event history"))
        self._wake()

    def fail(self, error: Exception) -> None:
        self._error = error
        self._queue.clear()
        self._wake()

    def close(self) -> None:
        """End the stream after the events already queued, as a dropped connection does."""
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchEvent[Any]:
        while not self._queue:
            if self._error is not None:
                raise self._error
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            self._waiter = None
        return self._queue.popleft()

    async def aclose(self) -> None:
        self.close()


class History:
    """The last `limit` events of one kind, so a watch can resume from a recent version."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._events: deque[tuple[int, WatchEvent[Any]]] = deque(maxlen=limit)
        # Versions up to this one are no longer held: resuming from before it is Gone.
        self._dropped_upto = 0
        self._watchers: weakref.WeakSet[Watcher] = weakref.WeakSet()

    def append(self, rv: int, event: WatchEvent[Any]) -> None:
        if len(self._events) == self._limit:
            self._dropped_upto = self._events[0][0]
        self._events.append((rv, event))
        if not self._watchers:
            return
        for w in self._watchers:
            w.push(event)

    def watch(
        self, namespace: str | None, since: int | None, initial: list[WatchEvent[Any]]
    ) -> Watcher:
        """A stream of the events after version `since`, or of `initial` then what follows."""
        if since is None:
            w = Watcher(namespace, [e for e in initial if _in(e, namespace)], self._limit)
        elif since < self._dropped_upto:
            w = Watcher(namespace, [], self._limit)
            w.fail(Gone(f"too old resource version: {since} ({self._dropped_upto})"))
        else:
            backlog: list[WatchEvent[Any]] = []
            for rv, e in reversed(self._events):
                if rv <= since:
                    break
                if _in(e, namespace):
                    backlog.append(e)
            backlog.reverse()
            w = Watcher(namespace, backlog, self._limit)
        self._watchers.add(w)
        return w

    def close_watchers(self) -> None:
        for w in list(self._watchers):
            w.close()


def _in(event: WatchEvent[Any], namespace: str | None) -> bool:
    return not namespace or event.object.metadata.namespace == namespace


class Selected:
    """A watch stream narrowed to the objects a label selector matches.

    An object that starts matching arrives as ADDED, one that stops matching as DELETED
    (its last matching content at the change's resourceVersion), as on the API server,
    so a cache fed by the stream holds exactly the matching objects.
    """

    def __init__(
        self,
        inner: AsyncIterator[WatchEvent[Any]],
        selects: Callable[[Any], bool],
        previous: Callable[[WatchEvent[Any]], Any],
        unmatched: Callable[[Any, WatchEvent[Any]], Any],
        initial: int,
    ) -> None:
        self._inner = inner
        self._selects = selects
        self._previous = previous
        self._unmatched = unmatched
        # The first `initial` events are the current objects of a watch without a version.
        self._initial = initial

    def __aiter__(self) -> Selected:
        return self

    async def __anext__(self) -> WatchEvent[Any]:
        while True:
            event = await anext(self._inner)
            if self._initial:
                self._initial -= 1
                return event
            now = event.type != "DELETED" and self._selects(event.object)
            previous = self._previous(event)
            was = previous is not None and self._selects(previous)
            if now:
                return event if was else WatchEvent("ADDED", event.object)
            if was and event.type == "DELETED":
                return event
            if was:
                return WatchEvent("DELETED", self._unmatched(previous, event))

    async def aclose(self) -> None:
        aclose = getattr(self._inner, "aclose", None)
        if aclose is not None:
            await aclose()
