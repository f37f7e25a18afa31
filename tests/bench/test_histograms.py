"""bench start's account of the binder's own histograms during the burst: the difference
of two scrapes of its /metrics (bench.histograms), for the collector's pauses and the
passes and the webhooks."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from gpu_binder.bench.histograms import GC_PAUSES, both, parse, since
from gpu_binder.binder import PASS_KEY, REQUESTS_KEY
from gpu_binder.binder.metrics import Metrics
from gpu_binder.kube.collector import Pauses
from gpu_binder.kube.metrics import RunMetrics


def test_only_the_pauses_between_the_two_scrapes_count() -> None:
    registry, pauses = CollectorRegistry(), Pauses()
    registry.register(pauses)
    family, label, long = GC_PAUSES
    pauses.observe(2, 0.7)
    before = parse(generate_latest(registry).decode(), family, label)
    pauses.observe(2, 0.3)
    pauses.observe(2, 0.02)
    pauses.observe(0, 0.001)
    figures = since(before, parse(generate_latest(registry).decode(), family, label), long)
    assert figures["2"] == {
        "n": 2,
        "seconds": 0.32,
        "over_0.1_s": 1,
        "over_0.25_s": 1,
        "over_0.5_s": 0,
    }
    assert figures["0"] == {
        "n": 1,
        "seconds": 0.001,
        "over_0.1_s": 0,
        "over_0.25_s": 0,
        "over_0.5_s": 0,
    }


def test_the_passes_are_counted_by_key() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    registry.register(Pauses())
    before = generate_latest(registry).decode()
    metrics.pass_seconds.labels(REQUESTS_KEY).observe(0.3)
    metrics.pass_seconds.labels(REQUESTS_KEY).observe(1.5)
    metrics.pass_seconds.labels(PASS_KEY).observe(6.0)
    passes = both(before, generate_latest(registry).decode())["passes"]
    assert passes == {
        PASS_KEY: {"n": 1, "seconds": 6.0, "over_0.25_s": 1, "over_1.0_s": 1, "over_5.0_s": 1},
        REQUESTS_KEY: {
            "n": 2,
            "seconds": 1.8,
            "over_0.25_s": 2,
            "over_1.0_s": 1,
            "over_5.0_s": 0,
        },
    }


def test_a_webhooks_answers_are_summed_over_allowed_and_denied() -> None:
    registry = CollectorRegistry()
    run = RunMetrics(registry)
    before = generate_latest(registry).decode()
    run.admissions.labels("vmi", "true").observe(0.02)
    run.admissions.labels("vmi", "false").observe(0.3)
    run.admissions.labels("pod", "true").observe(0.004)
    webhooks = both(before, generate_latest(registry).decode())["webhooks"]
    assert webhooks == {
        "pod": {"n": 1, "seconds": 0.004, "over_0.05_s": 0, "over_0.25_s": 0, "over_1.0_s": 0},
        "vmi": {"n": 2, "seconds": 0.32, "over_0.05_s": 1, "over_0.25_s": 1, "over_1.0_s": 0},
    }


def test_the_event_loop_lag_is_read_without_a_label() -> None:
    registry = CollectorRegistry()
    run = RunMetrics(registry)
    before = generate_latest(registry).decode()
    run.loop_lag.observe(0.002)
    run.loop_lag.observe(0.4)
    assert both(before, generate_latest(registry).decode())["loop_lag"] == {
        "": {"n": 2, "seconds": 0.402, "over_0.05_s": 1, "over_0.25_s": 1, "over_1.0_s": 0}
    }
