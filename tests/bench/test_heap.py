"""bench heap's readings of the binder process: its memory and its collector's gauge."""

from __future__ import annotations

import os

from gpu_binder.bench import heap, histograms

METRICS = """# HELP gpu_binder_gc_frozen_objects Objects the collector does not scan
# TYPE gpu_binder_gc_frozen_objects gauge
gpu_binder_gc_frozen_objects 963681.0
gpu_binder_gc_frozen_objects_other 1.0
"""


def test_a_gauge_is_read_by_its_exact_name() -> None:
    assert histograms.gauge(METRICS, heap.FROZEN) == 963681.0


def test_a_gauge_not_exposed_reads_as_none() -> None:
    assert histograms.gauge(METRICS, "gpu_binder_absent") is None


def test_a_process_memory_is_its_resident_set_now_and_at_its_peak() -> None:
    memory = heap.memory_kib(os.getpid())
    assert 0 < memory["VmRSS"] <= memory["VmHWM"]
