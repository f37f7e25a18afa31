"""How late the event loop runs what is ready: the wait a webhook review, a watch event or
a lease renewal sees before this process gets to it.

Everything of the binder shares one event loop: the informers' decoding, the passes'
decisions, the writes' round trips and both webhooks. A review the API server sends while
the loop is busy is read only when the callback in progress returns, and that wait is in
no handler's own timing (`gpu_binder_webhook_duration_seconds` starts at the read). A task
that asks to wake every `interval` and measures how late it woke sees the longest of
those stretches, which is what an operator needs to tell a slow webhook from a busy
process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import Histogram


class LoopLag:
    """Samples the event loop's lateness every `interval` seconds into `lag`
    (RunMetrics.loop_lag)."""

    def __init__(
        self,
        lag: Histogram,
        interval: float = 0.1,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.lag = lag
        self.interval = interval
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            due = self._clock() + self.interval
            await asyncio.sleep(self.interval)
            self.lag.observe(max(0.0, self._clock() - due))
