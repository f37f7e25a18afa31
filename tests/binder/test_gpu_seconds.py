"""The GPU-seconds counters (gpu_binder_gpu_seconds_total{namespace, class_name, kind}):
the ledger's closed records plus its open ones so far, the same on every replica, never
going down, and a new process resumes where the ledger stands, not from zero."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry

from gpu_binder.api.types import GPUUsageRecord
from gpu_binder.binder.ledgertotals import HOLDBACK, LedgerTotals
from gpu_binder.binder.metrics import Metrics
from gpu_binder.cache import World, feed
from gpu_binder.client.interface import WatchEvent
from gpu_binder.kube.ledgerfold import fold

from .cluster import LEDGER, NAMESPACE, Cluster

KEY_ATTACHED = (NAMESPACE, "h100", "attached")
KEY_RESERVED = (NAMESPACE, "h100", "reserved")


class Replica:
    """A process's counters: its own fold of the ledger over the cluster's API."""

    def __init__(self, cluster: Cluster, world: World | None = None) -> None:
        self.cluster = cluster
        self.world = world or cluster.world
        self.totals = LedgerTotals()
        self.task = asyncio.create_task(fold(cluster.client, LEDGER, self.totals))

    async def values(self) -> dict[tuple[str, str, str], float]:
        for _ in range(100):
            await asyncio.sleep(0)
        assert self.totals.loaded
        return self.totals.values(self.world, self.cluster.clock.now)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def replica(cluster: Cluster) -> AsyncIterator[Replica]:
    r = Replica(cluster)
    yield r
    await r.stop()


async def a_day(cluster: Cluster) -> None:
    """Reserved 1 h (bound while stopped), used 2 h, reserved again since 30 min."""
    cluster.node("node-a")
    cluster.vm("vm", 1)
    await cluster.settle()
    cluster.set_running("vm", True)
    cluster.clock.advance(hours=1)
    cluster.start("vm")
    await cluster.settle()
    cluster.clock.advance(hours=2)
    await cluster.stop("vm")
    await cluster.settle()
    cluster.clock.advance(minutes=30)


async def test_the_counters_are_the_ledgers_seconds_per_kind(
    cluster: Cluster, replica: Replica
) -> None:
    await a_day(cluster)
    values = await replica.values()
    assert values[KEY_ATTACHED] == 2 * 3600
    # The open reservation counts up to HOLDBACK before now: a VMI that just started is
    # not counted past its start before this replica's watch says so.
    assert values[KEY_RESERVED] == 3600 + 1800 - HOLDBACK.total_seconds()


async def test_a_new_process_resumes_where_the_ledger_stands(cluster: Cluster) -> None:
    first = Replica(cluster)
    await a_day(cluster)
    before = await first.values()
    await first.stop()
    cluster.restart()  # a new leader, or the same after a crash: its counters from the ledger
    second = Replica(cluster)
    try:
        assert await second.values() == before
    finally:
        await second.stop()


async def test_every_replica_exports_the_same_values(cluster: Cluster, replica: Replica) -> None:
    await a_day(cluster)
    other_world = World()
    records = [WatchEvent("ADDED", r) for r in cluster.client.objects(GPUUsageRecord)]
    feed(other_world, records, cluster.config.kubevirt_namespace)
    for d in cluster.world.devices.by_name.values():
        other_world.put_device(d)
    standby = Replica(cluster, other_world)
    try:
        assert await standby.values() == await replica.values()
    finally:
        await standby.stop()


async def test_a_record_closed_while_the_cache_holds_it_open_counts_once(
    cluster: Cluster, replica: Replica
) -> None:
    await a_day(cluster)
    before = await replica.values()
    [open_reserved] = [r for r in cluster.reserved() if r.spec.end is None]
    closed = open_reserved.model_copy(
        update={"spec": open_reserved.spec.model_copy(update={"end": cluster.clock.now})}
    )
    replica.totals.count(closed)  # the fold saw it close; this replica's cache not yet
    after = await replica.values()
    assert after[KEY_RESERVED] - before[KEY_RESERVED] == pytest.approx(HOLDBACK.total_seconds())


async def test_the_counters_never_go_down_when_a_close_ends_earlier_than_counted(
    cluster: Cluster, replica: Replica
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    cluster.clock.advance(hours=1)
    counted = (await replica.values())[KEY_ATTACHED]
    # A close that ends before what was counted of it. The binder no longer writes one:
    # a record never ends before the binder last saw its VMI running (issue 11 item 4).
    # Another writer's record, or a binder that never saw the VMI run, still may.
    [record] = cluster.records()
    early = cluster.clock.now - timedelta(minutes=10)
    closed = record.model_copy(update={"spec": record.spec.model_copy(update={"end": early})})
    replica.totals.count(closed)
    assert (await replica.values())[KEY_ATTACHED] == counted


async def test_they_are_exported_once_the_closed_records_were_read(
    cluster: Cluster, replica: Replica
) -> None:
    metrics = Metrics(CollectorRegistry())
    metrics.gpu_seconds.world = cluster.world
    metrics.gpu_seconds.totals = LedgerTotals()
    metrics.gpu_seconds.clock = lambda: cluster.clock.now
    labels = {"namespace": NAMESPACE, "class_name": "h100", "kind": "attached"}
    sample = "gpu_binder_gpu_seconds_total"
    await a_day(cluster)
    assert metrics.registry.get_sample_value(sample, labels) is None, "not read yet"
    metrics.gpu_seconds.totals = replica.totals
    await replica.values()
    assert metrics.registry.get_sample_value(sample, labels) == 2 * 3600
