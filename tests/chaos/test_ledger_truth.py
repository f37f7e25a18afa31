"""Invariant 12 on a whole run: the binder's ledger against the sim's own truth of GPU
time. Without --chaos every clock is on the true time, so every end of every interval is
held to 1 s (under --chaos, test_chaos judges it with the clocks' skew allowed at ends no
binder saw)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from gpu_binder.api.types import GPUUsageRecord
from gpu_binder.binder import ledger
from gpu_binder.sim.command import run


async def test_the_ledger_bills_what_the_cluster_used_to_the_second() -> None:
    figures = await run(nodes=6, gpus_per_node=8, vms=30, events=300, seed=1, chaos=False)
    check = figures["ledger_check"]
    assert check["intervals"] > 100
    assert check["truth_gpu_seconds"] == check["ledger_gpu_seconds"]
    assert check["worst_interval_seconds"] == 0.0
    assert figures["violations"] == []


async def test_records_closed_five_seconds_late_violate_12(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    close = ledger.closed

    def late(rec: GPUUsageRecord, end: datetime) -> GPUUsageRecord:
        return close(rec, end + timedelta(seconds=5))

    monkeypatch.setattr(ledger, "closed", late)
    figures = await run(nodes=6, gpus_per_node=8, vms=30, events=300, seed=1, chaos=False)
    check = figures["ledger_check"]
    assert check["worst_interval_seconds"] == 5.0
    assert check["beyond_tolerance"] == figures["violation_counts"]["(12)"] > 0
