"""Events sent in the background, as client-go's broadcaster does: a pass never waits on them.

A decision's Event is worth less than the decision's latency (a webhook waits on the
requests pass), so notes queue here and one task creates them; when the API server is
slow and the buffer is full, the oldest notes are dropped, never the pass stalled.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from datetime import datetime

from gpu_binder.binder import ClientRecorder, Note
from gpu_binder.client.errors import ApiError
from gpu_binder.client.interface import Client

log = logging.getLogger(__name__)


class BackgroundRecorder:
    def __init__(self, client: Client, instance: str, buffer: int = 1000) -> None:
        self._recorder = ClientRecorder(client, instance)
        self._pending: deque[tuple[Note, datetime]] = deque(maxlen=buffer)
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    async def record(self, note: Note, now: datetime) -> None:
        self._pending.append((note, now))
        self._ready.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._send(), name="events")

    async def stop(self, flush_seconds: float = 2.0) -> None:
        """Send what is queued (bounded in time), then stop."""
        try:
            async with asyncio.timeout(flush_seconds):
                while self._pending and self._task is not None and not self._task.done():
                    await asyncio.sleep(0.01)
        except TimeoutError:
            pass
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _send(self) -> None:
        while True:
            await self._ready.wait()
            self._ready.clear()
            while self._pending:
                note, now = self._pending.popleft()
                try:
                    await self._recorder.record(note, now)
                    self.sent += 1
                except ApiError as e:
                    log.warning("could not record event %s on %s: %s", note.reason, note.name, e)
