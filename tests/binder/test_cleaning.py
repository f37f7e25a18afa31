"""Cleaning: a released device is reset by its agent before the next tenant may bind it."""

from __future__ import annotations

from datetime import timedelta

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
