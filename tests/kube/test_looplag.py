"""The event loop's lateness (kube.looplag): what a webhook review waits behind."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from gpu_binder.kube.looplag import LoopLag
from gpu_binder.kube.metrics import RunMetrics

FAMILY = "gpu_binder_event_loop_lag_duration_seconds"


def observed(registry: CollectorRegistry, bound: str) -> float:
    value = registry.get_sample_value(f"{FAMILY}_bucket", {"le": bound})
    return value or 0.0


async def test_a_callback_that_holds_the_loop_shows_as_lag() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(RunMetrics(registry).loop_lag, interval=0.01)
    lag.start()
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # a pass deciding without yielding
    await asyncio.sleep(0.05)
    await lag.stop()
    count = registry.get_sample_value(f"{FAMILY}_count") or 0.0
    assert count - observed(registry, "0.25") == 1  # the one wake that waited for it


async def test_an_idle_loop_is_not_late() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(RunMetrics(registry).loop_lag, interval=0.01)
    lag.start()
    await asyncio.sleep(0.2)
    await lag.stop()
    count = registry.get_sample_value(f"{FAMILY}_count") or 0.0
    assert count >= 5
    assert observed(registry, "0.1") == count
