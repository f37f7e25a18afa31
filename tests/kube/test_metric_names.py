"""The binder's metric names follow Prometheus's conventions, read from its /metrics as a
scraper parses it (prometheus-client's own parser); promtool's lint of the same exposition
is in tests/controlplane/test_prometheus.py.

https://prometheus.io/docs/practices/naming/: one prefix, base units spelt out at the end
of the name (durations `_seconds`, what they time before it: `_duration_seconds`; points in
time `_timestamp_seconds`), counters end in `_total` and nothing else does, and the version
is the value-1 gauge `<prefix>_build_info`.
"""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from gpu_binder.binder.ledgertotals import LedgerTotals
from gpu_binder.binder.metrics import Metrics, version
from gpu_binder.cache import World
from gpu_binder.kube.collector import Pauses
from gpu_binder.kube.metrics import RunMetrics

PREFIX = "gpu_binder_"


def exposition() -> str:
    """Every family the binder's /metrics can show, each with a sample."""
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    run = RunMetrics(registry)
    registry.register(Pauses())
    for owner in (metrics, run):
        for wrapper in vars(owner).values():
            if isinstance(wrapper, MetricWrapperBase) and wrapper._labelnames:
                wrapper.labels(*("x" for _ in wrapper._labelnames))
    metrics.tenants.held = {("tenant", "h100", "attached"): 1}
    totals = LedgerTotals()
    totals.closed, totals.loaded = {("tenant", "h100", "attached"): 60.0}, True
    metrics.gpu_seconds.world, metrics.gpu_seconds.totals = World(), totals
    return generate_latest(registry).decode()


# The client adds a `<counter or histogram>_created` gauge, OpenMetrics' creation time.
FAMILIES = {
    f.name: f
    for f in text_string_to_metric_families(exposition())
    if not f.name.endswith("_created")
}


def test_every_family_has_the_prefix_snake_case_and_help() -> None:
    for name, family in FAMILIES.items():
        assert name.startswith(PREFIX), name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
        assert family.documentation.strip(), f"{name} has no help"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_that_times_something_says_so_in_base_units(name: str) -> None:
    family = FAMILIES[name]
    if family.type in ("histogram", "summary"):
        # What the binder observes are durations: passes and admissions.
        assert name.endswith("_duration_seconds"), name
    for wrong in ("_ms", "_milliseconds", "_secs", "_minutes", "_seconds_total"):
        assert not name.endswith(wrong), name
    if "timestamp" in name:
        assert name.endswith("_timestamp_seconds"), name


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_only_counters_end_in_total(name: str) -> None:
    family = FAMILIES[name]
    samples = {s.name for s in family.samples}
    if family.type == "counter":
        assert f"{name}_total" in samples, name
    else:
        assert not any(s.endswith("_total") for s in samples), name


def test_build_info_is_a_gauge_of_one_with_the_version() -> None:
    family = FAMILIES["gpu_binder_build_info"]
    assert family.type == "gauge"
    (sample,) = family.samples
    assert sample.value == 1 and sample.labels["version"] == version()


def test_gauges_name_what_they_count() -> None:
    for name, family in FAMILIES.items():
        if family.type == "gauge" and not name.endswith(("_timestamp_seconds", "_info")):
            # A count of things: devices, nodes, orders, attachments, GPUs, or the 0/1 leader.
            assert name.endswith(("s", "_leader")), name
