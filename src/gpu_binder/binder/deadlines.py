"""Deadlines: keys waiting on a clock, answered in O(due) rather than O(waiting).

A reservation that runs out changes an order's verdict with no event; the orders step
asks on each resync which keys are due. A heap with lazy deletion answers that without
walking every stopped VM: an entry whose key moved or left is dropped when it surfaces.
"""

from __future__ import annotations

import heapq
from datetime import datetime


class Deadlines:
    """When each key is due; `due(now)` lists the keys whose time has come."""

    def __init__(self) -> None:
        self._when: dict[str, datetime] = {}
        self._heap: list[tuple[datetime, str]] = []

    def __len__(self) -> int:
        return len(self._when)

    def __contains__(self, key: object) -> bool:
        return key in self._when

    def get(self, key: str) -> datetime | None:
        return self._when.get(key)

    def set(self, key: str, when: datetime) -> None:
        if self._when.get(key) == when:
            return
        self._when[key] = when
        heapq.heappush(self._heap, (when, key))
        if len(self._heap) > 2 * len(self._when) + 64:
            # Mostly stale entries: rebuild, so the heap stays within twice the keys.
            self._heap = [(t, k) for k, t in self._when.items()]
            heapq.heapify(self._heap)

    def discard(self, key: str) -> None:
        self._when.pop(key, None)

    def next(self) -> datetime | None:
        """The earliest time a key is due, None when none waits."""
        heap = self._heap
        while heap and self._when.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # stale: its key moved or left
        return heap[0][0] if heap else None

    def due(self, now: datetime) -> list[str]:
        """Keys due at `now`, earliest first; they stay until set anew or discarded."""
        heap = self._heap
        kept: list[tuple[datetime, str]] = []
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._when.get(entry[1]) == entry[0] and (not kept or kept[-1] != entry):
                kept.append(entry)
        for entry in kept:
            heapq.heappush(heap, entry)
        return [key for _, key in kept]
