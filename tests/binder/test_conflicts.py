"""A 409 aborts the pass's placement, requeues after a fixed 100 ms and skips the derived
state; the next pass, on a fresh read, recovers with no wrong placement."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.types import GPUDevice, Phase, RequestPhase
from gpu_binder.client.errors import Invalid

from .cluster import Cluster


def conflict_on_first_bind(cluster: Cluster) -> None:
    """A concurrent writer wins the race for the first device the binder binds."""
    fired = False

    def predicate(kind: str, stored: Any) -> bool:
        nonlocal fired
        if fired or kind != "GPUDevice" or stored.status.phase != Phase.AVAILABLE:
            return False
        fired = True
        return True

    cluster.client.inject_conflicts(predicate)


async def test_a_conflict_aborts_the_pass_and_requeues_after_100_ms(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    conflict_on_first_bind(cluster)
    result = await cluster.run()
    assert result.aborted and result.conflicts == 1 and not result.errors
    assert result.requeue_after == timedelta(milliseconds=100)
    assert cluster.set_of("vm") == []


async def test_the_requeue_after_a_conflict_does_not_grow(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    for _ in range(3):
        conflict_on_first_bind(cluster)
        assert (await cluster.run()).requeue_after == timedelta(milliseconds=100)


async def test_a_conflict_leaves_no_staged_placement_in_the_binders_cache(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    conflict_on_first_bind(cluster)
    await cluster.run()
    for d in cluster.client.objects(GPUDevice):
        cached = cluster.world.devices.get(d.metadata.name)
        assert cached is not None and cached.status == d.status


async def test_an_aborted_pass_skips_usage_records_and_class_status(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("running", 1, running=True)
    await cluster.settle()
    status = cluster.gpu_class_status()
    cluster.start("running")
    cluster.vm("vm", 2)
    conflict_on_first_bind(cluster)
    result = await cluster.run()
    assert result.aborted
    assert cluster.records() == []
    assert cluster.gpu_class_status() == status
    await cluster.settle()
    assert len(cluster.records()) == 1
    assert cluster.gpu_class_status().attached == 1


async def test_the_pass_after_a_conflict_places_the_order(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    conflict_on_first_bind(cluster)
    await cluster.run()
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2
    assert cluster.violations() == []


async def test_a_stale_read_costs_a_conflict_never_a_wrong_placement(cluster: Cluster) -> None:
    first, second = cluster.node("node-a", 2)
    await cluster.settle()
    cluster.vm("vm", 1)
    cluster.lag()
    cluster.set_unschedulable(first)  # the binder's cache has not seen this yet
    result = await cluster.run()
    assert result.aborted and result.conflicts >= 1
    assert cluster.bound_to(first) is None
    cluster.catch_up()
    await cluster.settle()
    assert cluster.set_of("vm") == [second]
    assert cluster.bound_to(first) is None


async def test_a_conflict_answering_requests_requeues_after_100_ms(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)
    cluster.request("vm", 1)
    conflict_on_first_bind(cluster)
    result = await cluster.answer_requests()
    assert result.aborted and result.requeue_after == timedelta(milliseconds=100)
    result = await cluster.answer_requests()
    assert not result.aborted
    answer = cluster.answer("vm-bind").status
    assert answer.phase == RequestPhase.BOUND
    assert list(answer.devices) == cluster.set_of("vm") and len(answer.devices) == 1


async def test_any_other_error_is_raised_for_the_queue_to_back_off(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 1)

    async def refuse(obj: Any) -> Any:
        raise Invalid("admission webhook denied the request")

    monkeypatch.setattr(cluster.client, "update_status", refuse)
    with pytest.raises(Invalid):
        await cluster.run()


async def test_the_leaders_own_writes_are_known_as_written_and_a_conflict_forgets_them(
    cluster: Cluster,
) -> None:
    """World.written_device, which the webhook pins from while leading: a device the pass
    wrote is its response; a decision staged over it is not; after a 409 on it, it is
    read from the API server again; nothing stays staged after a pass."""
    cluster.node("node-a")
    await cluster.settle()
    world = cluster.world
    written = [n for n in world.devices.by_name if world.written_device(n) is not None]
    assert written  # classified by the binder's own writes
    for name in written:
        stored = cluster.client.peek(GPUDevice, name)
        assert stored is not None
        assert world.written_device(name) == stored
    cluster.vm("vm", 2)
    conflict_on_first_bind(cluster)
    await cluster.run()
    assert not world.staged
    raced = [n for n in world.devices.by_name if world.written_device(n) is None]
    assert raced  # the device the 409 was on (and those its abort un-staged)
    await cluster.settle()
    for name in cluster.set_of("vm"):
        assert world.written_device(name) == cluster.client.peek(GPUDevice, name)
