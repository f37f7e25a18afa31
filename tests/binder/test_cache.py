"""The write-through device cache: the binder's own writes enter its cache at once, and
late events never take it back to what the binder already replaced."""

from __future__ import annotations

from gpu_binder.api.types import GPUDevice

from .cluster import NAMESPACE, Cluster


async def test_the_binders_writes_enter_its_cache_before_any_event(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    cluster.lag()
    await cluster.run()
    assert [d.metadata.name for d in cluster.world.devices.set_of(f"{NAMESPACE}/vm")] == (
        cluster.set_of("vm")
    )
    assert len(cluster.set_of("vm")) == 2


async def test_a_second_pass_before_the_events_arrive_binds_nothing_twice(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    cluster.lag()
    await cluster.run()
    assert (await cluster.run()).writes == 0
    assert len(cluster.set_of("vm")) == 2


async def test_late_events_do_not_take_the_cache_back(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    cluster.lag()
    await cluster.run()
    cluster.catch_up()  # the events of the binder's own writes, and older ones, arrive now
    for d in cluster.client.objects(GPUDevice):
        cached = cluster.world.devices.get(d.metadata.name)
        assert cached is not None and cached.metadata.resource_version == (
            d.metadata.resource_version
        )
    assert (await cluster.run()).writes == 0
