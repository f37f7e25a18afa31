"""bench soak's readings: the series a /metrics text serves, and growth across rounds."""

from __future__ import annotations

from typing import Any

from gpu_binder.bench import soak

METRICS = """# HELP gpu_binder_binds_total Sets bound
# TYPE gpu_binder_binds_total counter
gpu_binder_binds_total{reason="order"} 4.0
gpu_binder_binds_total{reason="request"} 1.0

gpu_binder_gc_frozen_objects 10.0
"""


def rounds(values: list[float]) -> list[dict[str, Any]]:
    return [{"vms_so_far": (i + 1) * 100, "rss_mib": v} for i, v in enumerate(values)]


def test_every_sample_line_is_a_series_and_comments_are_not() -> None:
    assert soak.series(METRICS) == 3


def test_growth_is_read_over_the_second_half_so_warm_up_is_not_growth() -> None:
    assert soak.slope(rounds([100, 300, 500, 500, 500, 500]), "rss_mib", 1000) == 0.0


def test_steady_growth_reads_per_thousand_vms() -> None:
    assert soak.slope(rounds([100, 101, 102, 103, 104, 105]), "rss_mib", 1000) == 10.0


def test_too_few_rounds_read_no_growth() -> None:
    assert soak.slope(rounds([100, 200, 300]), "rss_mib", 1000) is None
