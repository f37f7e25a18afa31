"""The work queue: keys, each at most once, handed to one worker at a time.

Like client-go's workqueue: a key added while it is being processed runs once more after;
`add_after` requeues at a fixed delay (the binder's resync and its 100 ms after a conflict);
`add_rate_limited` backs off exponentially per key until `forget`. The requests key is
handed out before any other, because a webhook is waiting for its pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class ShutDown(Exception):
    """The queue was shut down: the worker stops."""


class WorkQueue:
    def __init__(
        self,
        first: Iterable[str] = (),
        base_delay: float = 0.005,
        max_delay: float = 30.0,
    ) -> None:
        self._first = frozenset(first)
        self._base = base_delay
        self._max = max_delay
        self._queue: dict[str, None] = {}
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._ready = asyncio.Event()
        self._shut = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        if self._shut:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        self._queue[key] = None
        self._ready.set()

    def add_after(self, key: str, delay: float) -> None:
        """Add key after delay seconds; an earlier pending timer for it wins."""
        if self._shut:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled():
            if timer.when() <= when:
                return
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def add_rate_limited(self, key: str) -> None:
        """Add key after a delay that doubles with each failure since the last forget."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        self.add_after(key, min(self._base * 2**n, self._max))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    async def get(self) -> str:
        """The next key to process; raises ShutDown once the queue is shut down."""
        while not self._queue:
            if self._shut:
                raise ShutDown
            self._ready.clear()
            await self._ready.wait()
        key = next((k for k in self._queue if k in self._first), None)
        if key is None:
            key = next(iter(self._queue))
        del self._queue[key]
        self._processing.add(key)
        return key

    def done(self, key: str) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def shutdown(self) -> None:
        self._shut = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._queue.clear()
        self._ready.set()

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)
