"""Python's cyclic garbage collector in a long-running binder: its full scans kept off the
event loop, and every collection's pause measured.

The caches hold every GPUDevice, VM, VMI, pod and record as parsed objects: about 360,000
Python objects at 4,000 GPUs, 2.7 million at 50,000. CPython scans all of them in a full
collection, which comes each time a quarter as many again have survived two younger ones,
and the event loop (the webhook's answers with it) stops for the scan. `gpu-binder bench
start --nodes 500 --vms 1000` measured ten full collections of 240–740 ms in its 70 s
burst, most of them freeing nothing: cached objects live until a watch replaces them and
are then freed by reference counting, so the collector has nothing to find among them.

So what survives the young generations is frozen (`gc.freeze`: out of every later scan)
as soon as the collection that promoted it ends, from the start: a full collection then
finds nothing to scan. Freezing only what full collections found alive was not enough: a
relist at 50,000 GPUs still set off 26 of them, 17 s of stops, and the first pass's
write wave (each answer replacing a cached object) 44, 10 s; freezing every promotion,
none (`gpu-binder bench heap`, docs/CONTROLPLANE.md). Once the caches have synced, and
every `interval` after, everything is unfrozen and collected in full once, which frees
whatever cyclic garbage frozen objects became meanwhile: nothing frozen is kept longer
than an interval (or than the relist, before the first), and cycles that die young are
still freed by the young collections. That collection is the one long pause left, once
an interval (1.3–1.5 s at 50,000 GPUs on a two-core machine, 0.2 s at 4,000).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

log = logging.getLogger(__name__)

BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GENERATIONS = 3


class Pauses:
    """Every collection's duration, by generation, as a Prometheus histogram.

    The gc callback runs inside whatever allocation set the collection off, a metric's own
    observe included; prometheus_client's values take a lock that is not reentrant, so the
    callback only counts into plain lists and the registry reads them when scraped."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started = 0.0
        self.buckets = [[0] * len(BUCKETS) for _ in range(GENERATIONS)]
        self.counts = [0] * GENERATIONS
        self.sums = [0.0] * GENERATIONS

    def install(self) -> None:
        if self._on_collection not in gc.callbacks:
            gc.callbacks.append(self._on_collection)

    def remove(self) -> None:
        if self._on_collection in gc.callbacks:
            gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = self._clock()
            return
        self.observe(int(info.get("generation", 0)), self._clock() - self._started)

    def observe(self, generation: int, seconds: float) -> None:
        if not 0 <= generation < GENERATIONS:
            return
        self.counts[generation] += 1
        self.sums[generation] += seconds
        row = self.buckets[generation]
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                row[i] += 1

    def collect(self) -> Iterator[Metric]:
        pauses = HistogramMetricFamily(
            "gpu_binder_gc_pause_duration_seconds",
            "Time the process stopped for a collection of Python's cyclic garbage collector, "
            "by generation (2: full)",
            labels=["generation"],
        )
        for g in range(GENERATIONS):
            cumulative = [(str(b), float(n)) for b, n in zip(BUCKETS, self.buckets[g], strict=True)]
            pauses.add_metric(
                [str(g)], [*cumulative, ("+Inf", float(self.counts[g]))], self.sums[g]
            )
        yield pauses
        frozen = GaugeMetricFamily(
            "gpu_binder_gc_frozen_objects",
            "Objects the collector does not scan (gc.freeze), as of the last freeze",
        )
        frozen.add_metric([], float(gc.get_freeze_count()))
        yield frozen


class Collector:
    """Freezes what survives the young generations, and collects it all once the caches
    are synced and every `interval` after; `interval` None leaves the collector as
    Python sets it."""

    def __init__(
        self,
        registry: CollectorRegistry,
        interval: float | None,
        synced: Callable[[], bool],
    ) -> None:
        self.pauses = Pauses()
        registry.register(self.pauses)
        self.interval = interval
        self._synced = synced
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.pauses.install()
        if self.interval is not None:
            gc.callbacks.append(self._freeze_survivors)
            self._task = asyncio.create_task(self._run(self.interval), name="gc-freeze")

    def _freeze_survivors(self, phase: str, info: dict[str, Any]) -> None:
        # At the end of a collection of the middle generation, or of a full one, the
        # younger generations are empty: what is frozen is exactly what it promoted.
        if phase == "stop" and info.get("generation", 0) >= 1:
            gc.freeze()

    async def stop(self) -> None:
        self.pauses.remove()
        if self._freeze_survivors in gc.callbacks:
            gc.callbacks.remove(self._freeze_survivors)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        # Unfrozen, so that what the process keeps after (a test's, a restart's) is scanned.
        gc.unfreeze()

    async def _run(self, interval: float) -> None:
        while not self._synced():
            await asyncio.sleep(1.0)
        while True:
            refreeze()
            await asyncio.sleep(interval)


def refreeze() -> tuple[int, float]:
    """One full collection of everything, frozen or not, then freeze what survived: the
    objects frozen and the seconds it took."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    took = time.perf_counter() - started
    frozen = gc.get_freeze_count()
    log.info("heap frozen", extra={"objects": frozen, "seconds": round(took, 3)})
    return frozen, took
