"""The garbage collector in a long-running binder (kube.collector): every collection's
pause is a metric, what survives the young generations is frozen out of the full scans, and
everything is collected once the caches synced and every interval after, so no cyclic
garbage is kept longer."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_binder.kube.collector import Collector, Pauses, refreeze


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


class Node:
    """An object that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, s.labels.get("generation", "") + s.labels.get("le", "")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_a_full_collection_is_counted_under_generation_2() -> None:
    registry = CollectorRegistry()
    pauses = Pauses()
    registry.register(pauses)
    pauses.install()
    try:
        gc.collect()
    finally:
        pauses.remove()
    seen = samples(registry)
    assert seen[("gpu_binder_gc_pause_duration_seconds_count", "2")] >= 1
    assert seen[("gpu_binder_gc_pause_duration_seconds_sum", "2")] > 0


def test_a_pause_falls_in_every_bucket_at_or_above_it() -> None:
    pauses = Pauses()
    pauses.observe(1, 0.3)
    registry = CollectorRegistry()
    registry.register(pauses)
    seen = samples(registry)
    assert seen[("gpu_binder_gc_pause_duration_seconds_bucket", "10.25")] == 0
    assert seen[("gpu_binder_gc_pause_duration_seconds_bucket", "10.5")] == 1
    assert seen[("gpu_binder_gc_pause_duration_seconds_bucket", "1+Inf")] == 1
    assert seen[("gpu_binder_gc_pause_duration_seconds_count", "0")] == 0


def test_a_refreeze_takes_what_survived_out_of_the_scans() -> None:
    kept = Node()
    assert any(o is kept for o in gc.get_objects())
    frozen, _ = refreeze()
    assert frozen == gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects()), "a scan still walks it"


def test_cyclic_garbage_frozen_is_freed_by_the_next_refreeze() -> None:
    ref = cycle()
    gc.freeze()
    gc.collect()
    assert ref() is not None, "a frozen cycle is not collected"
    refreeze()
    assert ref() is None


async def test_while_the_caches_fill_a_full_collection_freezes_what_it_found() -> None:
    collector = Collector(CollectorRegistry(), interval=3600.0, synced=lambda: False)
    gc.unfreeze()
    collector.start()
    try:
        kept = Node()
        gc.collect()
        assert not any(o is kept for o in gc.get_objects()), "the next full scan walks it"
    finally:
        await collector.stop()
    assert gc.get_freeze_count() == 0, "stopped, it leaves nothing frozen"


async def test_what_survives_the_young_generations_is_frozen_out_of_full_scans() -> None:
    collector = Collector(CollectorRegistry(), interval=3600.0, synced=lambda: False)
    gc.unfreeze()
    collector.start()
    try:
        kept = Node()
        gc.collect(1)
        assert not any(o is kept for o in gc.get_objects()), "a full scan walks it"
    finally:
        await collector.stop()


async def test_the_first_collection_of_everything_comes_once_the_caches_synced() -> None:
    synced = False
    registry = CollectorRegistry()
    collector = Collector(registry, interval=3600.0, synced=lambda: synced)
    collector.start()
    try:
        ref = cycle()
        gc.freeze()  # as a full collection while the caches fill leaves it
        await asyncio.sleep(0.05)
        assert ref() is not None, "frozen, a cycle waits for the collection of everything"
        synced = True
        for _ in range(30):
            await asyncio.sleep(0.1)
            if ref() is None:
                break
        assert ref() is None
        assert samples(registry)[("gpu_binder_gc_frozen_objects", "")] > 0
    finally:
        await collector.stop()


async def test_without_an_interval_nothing_is_frozen_but_pauses_are_measured() -> None:
    registry = CollectorRegistry()
    collector = Collector(registry, interval=None, synced=lambda: True)
    collector.start()
    try:
        await asyncio.sleep(0.05)
        gc.collect()
        assert gc.get_freeze_count() == 0
    finally:
        await collector.stop()
    assert samples(registry)[("gpu_binder_gc_pause_duration_seconds_count", "2")] >= 1


async def test_what_a_full_collection_found_alive_is_frozen_out_of_the_next() -> None:
    registry = CollectorRegistry()
    collector = Collector(registry, interval=3600.0, synced=lambda: True)
    collector.start()
    try:
        for _ in range(30):
            await asyncio.sleep(0.1)
            if gc.get_freeze_count():
                break
        kept = Node()
        assert any(o is kept for o in gc.get_objects())
        gc.collect()
        assert not any(o is kept for o in gc.get_objects()), "the next full scan walks it"
    finally:
        await collector.stop()
