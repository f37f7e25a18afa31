"""bench start's account of the binder's collector pauses during the burst: the
difference of two scrapes of its histogram (bench.gcpauses)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpu_binder.bench.gcpauses import Pauses, parse, since
from gpu_binder.kube.collector import Pauses as Histogram


def scraped(h: Histogram) -> Pauses:
    registry = CollectorRegistry()
    registry.register(h)
    return parse(generate_latest(registry).decode())


def test_only_the_pauses_between_the_two_scrapes_count() -> None:
    h = Histogram()
    h.observe(2, 0.7)
    before = scraped(h)
    h.observe(2, 0.3)
    h.observe(2, 0.02)
    h.observe(0, 0.001)
    figures = since(before, scraped(h))
    assert figures["2"] == {
        "collections": 2,
        "seconds": 0.32,
        "over_0.1_s": 1,
        "over_0.25_s": 1,
        "over_0.5_s": 0,
    }
    assert figures["0"] == {
        "collections": 1,
        "seconds": 0.001,
        "over_0.1_s": 0,
        "over_0.25_s": 0,
        "over_0.5_s": 0,
    }
