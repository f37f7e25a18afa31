"""The controller: hands queued keys to the reconciler, one at a time, while this replica leads.

Errors back off on their key; a pass's own requeue (resync, or 100 ms after a conflict) is
a fixed delay; a pass the lease fence stopped is retried shortly, by this term if a late
renewal kept the lease, else by the next one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gpu_binder.binder import PASS_KEY, REQUESTS_KEY, NotLeader, Reconciler, Result
from gpu_binder.kube.cache import Informers
from gpu_binder.kube.queue import ShutDown, WorkQueue

log = logging.getLogger(__name__)

FENCED_RETRY = 0.5


class Controller:
    def __init__(
        self,
        queue: WorkQueue,
        informers: Informers,
        make_reconciler: Callable[[], Reconciler],
    ) -> None:
        self.queue = queue
        self.informers = informers
        self.make_reconciler = make_reconciler
        self.reconciler: Reconciler | None = None
        self.passes = 0
        # Passes completed per key, each key's last result, and the key being reconciled:
        # for benchmarks and tests that wait for the binder to settle.
        self.completed: dict[str, int] = {}
        self.results: dict[str, Result] = {}
        self.busy: str | None = None

    async def run(self) -> None:
        """Reconcile queued keys until cancelled (the lease lost) or the queue shut down."""
        await self.informers.wait_synced()
        # A new term starts with fresh memory, as a new leader process would.
        reconciler = self.reconciler = self.make_reconciler()
        reconciler.world.synced = True
        self.queue.add(REQUESTS_KEY)
        self.queue.add(PASS_KEY)
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            started = time.perf_counter()
            self.busy = key
            try:
                result = await reconciler.reconcile(key)
            except NotLeader:
                # The elector ends this term (cancelling us) unless a late renewal saved it.
                log.warning("the lease fence stopped a pass", extra={"key": key})
                self.queue.add_after(key, FENCED_RETRY)
            except asyncio.CancelledError:
                self.queue.add(key)
                raise
            except Exception as e:
                delay = self.queue.failures(key)
                log.warning("pass failed: %r", e, extra={"key": key, "failures": delay + 1})
                self.queue.add_rate_limited(key)
            else:
                self.queue.forget(key)
                self.passes += 1
                self.completed[key] = self.completed.get(key, 0) + 1
                self.results[key] = result
                took = time.perf_counter() - started
                reconciler.metrics.pass_seconds.labels(key).observe(took)
                if result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after.total_seconds())
                log.debug(
                    "pass",
                    extra={
                        "key": key,
                        "writes": result.writes,
                        "conflicts": result.conflicts,
                        "ms": round(took * 1e3, 2),
                    },
                )
            finally:
                self.busy = None
                self.queue.done(key)
