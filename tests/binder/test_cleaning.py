"""Cleaning: a released device is reset by its agent before the next tenant may bind it."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpu_binder.api.types import Phase

from .cluster import Cluster


async def released_device(cluster: Cluster) -> str:
    cluster.node("node-a", 1)
    cluster.vm("first", 1)
    await cluster.settle()
    [device] = cluster.set_of("first")
    cluster.clock.advance(minutes=1)
    await cluster.delete_vm("first")
    await cluster.settle()
    return device


async def test_a_released_device_is_cleaning_until_its_agent_resets_it(cluster: Cluster) -> None:
    device = await released_device(cluster)
    d = cluster.device(device)
    assert d.status.phase == Phase.CLEANING
    assert d.status.released_at == cluster.clock.now


def agent_reset(cluster: Cluster, device: str, at: datetime, released: datetime) -> None:
    """The agent's record of a reset: when, by the node's clock, and which release it
    cleaned (the releasedAt it saw, echoed in lastResetFor)."""
    d = cluster.device(device)
    spec = d.spec.model_copy(update={"last_reset": at, "last_reset_for": released})
    cluster.client.put(d.model_copy(update={"spec": spec}))


async def test_a_cleaning_device_is_not_bound_to_the_next_order(cluster: Cluster) -> None:
    await released_device(cluster)
    cluster.vm("second", 1)
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("second") == []


async def test_a_reset_from_before_the_release_does_not_clean_the_device(
    cluster: Cluster,
) -> None:
    device = await released_device(cluster)
    cluster.reset(device, at=cluster.clock.now - timedelta(seconds=1))
    await cluster.settle()
    assert cluster.phase(device) == Phase.CLEANING


async def test_a_device_reset_after_its_release_is_available_and_bound_again(
    cluster: Cluster,
) -> None:
    device = await released_device(cluster)
    cluster.vm("second", 1)
    cluster.reset(device, at=cluster.clock.advance(seconds=3))
    await cluster.settle()
    assert cluster.set_of("second") == [device]


async def test_a_reset_at_the_release_instant_cleans_the_device(cluster: Cluster) -> None:
    device = await released_device(cluster)
    cluster.reset(device, at=cluster.clock.now)
    await cluster.settle()
    assert cluster.phase(device) == Phase.AVAILABLE


async def test_with_cleaning_none_a_released_device_is_available_at_once(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(cleaning="None")
    device = await released_device(cluster)
    assert cluster.phase(device) == Phase.AVAILABLE
    cluster.vm("second", 1)
    await cluster.settle()
    assert cluster.set_of("second") == [device]


async def test_a_new_device_is_available_without_a_reset(cluster: Cluster) -> None:
    [device] = cluster.node("node-a", 1)
    await cluster.settle()
    assert cluster.phase(device) == Phase.AVAILABLE


async def test_a_reset_for_an_earlier_release_does_not_end_cleaning_when_the_node_clock_is_ahead(
    cluster: Cluster,
) -> None:
    device = await released_device(cluster)
    released = cluster.device(device).status.released_at
    assert released is not None
    # Reset for a release an hour before, stamped a day later by a node running fast.
    agent_reset(cluster, device, released + timedelta(days=1), released - timedelta(hours=1))
    await cluster.settle()
    assert cluster.phase(device) == Phase.CLEANING


async def test_a_reset_echoing_the_release_ends_cleaning_when_the_node_clock_is_behind(
    cluster: Cluster,
) -> None:
    device = await released_device(cluster)
    released = cluster.device(device).status.released_at
    assert released is not None
    agent_reset(cluster, device, released - timedelta(hours=1), released)
    await cluster.settle()
    assert cluster.phase(device) == Phase.AVAILABLE


async def test_an_old_agents_last_reset_after_the_release_still_ends_cleaning(
    cluster: Cluster,
) -> None:
    # An agent that predates lastResetFor writes lastReset only: accepted by time.
    device = await released_device(cluster)
    cluster.reset(device, at=cluster.clock.now + timedelta(seconds=1))
    await cluster.settle()
    assert cluster.device(device).spec.last_reset_for is None
    assert cluster.phase(device) == Phase.AVAILABLE
