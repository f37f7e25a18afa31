"""Clocks of other machines: times written by kubelets, virt-handler and agents are clamped,
so a record never ends after the binder's now, never starts before the previous record of
its device ended, and one GPU is never billed twice for the same second."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise

from gpu_binder.api.types import GPUUsageRecord

from .cluster import Cluster

AHEAD = timedelta(minutes=10)


async def running(cluster: Cluster, gpus: int = 1) -> list[str]:
    cluster.node("node-a", gpus)
    cluster.vm("vm", gpus, running=True)
    await cluster.settle()
    cluster.start("vm", scheduled=cluster.clock.now)
    await cluster.settle()
    return cluster.set_of("vm")


def closed(cluster: Cluster) -> list[GPUUsageRecord]:
    return [r for r in cluster.records() if r.spec.end is not None]


def overlaps(records: list[GPUUsageRecord], now: datetime) -> list[tuple[str, str]]:
    out = []
    by_device: dict[str, list[GPUUsageRecord]] = {}
    for r in records:
        by_device.setdefault(r.spec.device, []).append(r)
    for rs in by_device.values():
        rs.sort(key=lambda r: r.spec.start)
        for a, b in pairwise(rs):
            if (a.spec.end or now) > b.spec.start:
                out.append((a.metadata.name, b.metadata.name))
    return out


async def test_a_record_never_ends_after_now_when_the_nodes_clock_runs_ahead(
    cluster: Cluster,
) -> None:
    await running(cluster)
    cluster.clock.advance(minutes=30)
    cluster.finish("vm", at=cluster.clock.now + AHEAD)
    await cluster.settle()
    [record] = closed(cluster)
    assert record.spec.end is not None and record.spec.end <= cluster.clock.now


async def test_a_record_never_ends_before_it_started_when_the_nodes_clock_runs_behind(
    cluster: Cluster,
) -> None:
    await running(cluster)
    cluster.clock.advance(minutes=5)
    cluster.finish("vm", at=cluster.clock.now - AHEAD)
    await cluster.settle()
    [record] = closed(cluster)
    assert record.spec.end is not None and record.spec.end >= record.spec.start


async def test_a_record_never_starts_after_now_when_the_scheduler_stamp_runs_ahead(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    cluster.start("vm", scheduled=cluster.clock.now + AHEAD)
    await cluster.settle()
    [record] = cluster.records()
    assert record.spec.start <= cluster.clock.now


async def test_the_next_record_of_a_device_never_starts_before_the_last_one_ended(
    cluster: Cluster,
) -> None:
    """A VMI whose node reports its end 10 minutes ahead, and the next VMI of the VM on the
    same GPU a minute later: the GPU is billed once for every second."""
    await running(cluster)
    cluster.clock.advance(minutes=30)
    cluster.finish("vm", at=cluster.clock.now + AHEAD)
    await cluster.remove_vmi("vm")
    await cluster.settle()
    cluster.clock.advance(minutes=1)
    cluster.start("vm", scheduled=cluster.clock.now)
    await cluster.settle()
    records = cluster.records()
    assert len(records) == 2
    assert overlaps(records, cluster.clock.now) == []


async def test_a_stopped_vms_reservation_runs_from_the_stop_as_the_binder_saw_it(
    cluster: Cluster,
) -> None:
    """A stop stamped 10 minutes ahead does not hold a 10-minute reservation for 20."""
    cluster.gpu_class(release_after="10m")
    await running(cluster)
    cluster.clock.advance(minutes=30)
    cluster.set_running("vm", False)
    cluster.finish("vm", at=cluster.clock.now + AHEAD)
    await cluster.remove_vmi("vm")
    await cluster.settle()
    await cluster.settle_after(minutes=10, seconds=30)
    assert cluster.set_of("vm") == []


async def test_the_next_tenants_record_never_starts_before_the_last_tenant_detached(
    cluster: Cluster,
) -> None:
    """A GPU given to another VM once the last one let it go, whose VMI's node stamps its
    start 10 minutes behind: the new record starts no earlier than the old one ended,
    though the bind in between starts a new tenancy (chaos seed 3, 12 nodes: invariant 11)."""
    [gpu] = await running(cluster)
    cluster.clock.advance(minutes=30)
    cluster.finish("vm")
    await cluster.remove_vmi("vm")
    await cluster.delete_vm("vm")
    await cluster.settle()
    cluster.reset(gpu)  # cleaned by its agent
    await cluster.settle()
    cluster.clock.advance(minutes=1)
    cluster.vm("next", 1, running=True)
    await cluster.settle()
    cluster.start("next", scheduled=cluster.clock.now - AHEAD)
    await cluster.settle()
    records = cluster.records()
    assert len(records) == 2
    assert overlaps(records, cluster.clock.now) == []
