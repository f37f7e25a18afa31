"""Release of deleted devices: a deleted device goes once no live VMI runs on it."""

from __future__ import annotations

from gpu_binder.api.types import FINALIZER, GPUDevice, Phase
from gpu_binder.binder.config import Config

from .cluster import Cluster, gpu_name


async def test_a_deleted_device_with_no_vmi_goes_and_its_set_is_completed(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 3)
    cluster.vm("vm", 2)
    await cluster.settle()
    gone, kept = cluster.set_of("vm")
    await cluster.delete_device(gone)
    await cluster.settle()
    assert cluster.client.peek(GPUDevice, gone) is None
    assert kept in cluster.set_of("vm") and len(cluster.set_of("vm")) == 2
    [event] = cluster.events_of("vm", "GPUReleased")
    assert "the device was deleted" in event.message


async def test_a_deleted_device_waits_in_releasing_for_its_vmi_to_end(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    [device] = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    await cluster.delete_device(device)
    await cluster.settle_after(hours=1)
    d = cluster.device(device)
    assert d.status.phase == Phase.RELEASING
    assert FINALIZER in d.metadata.finalizers
    assert d.status.attachment is not None and cluster.bound_to(device) == "vm"
    assert cluster.events_of(device, "GPUReleasing")
    await cluster.stop("vm")
    await cluster.settle()
    assert cluster.client.peek(GPUDevice, device) is None


async def test_a_deleted_device_is_released_even_when_the_binder_is_disabled() -> None:
    cluster = Cluster()
    cluster.gpu_class()
    [device] = cluster.node("node-a", 1)
    await cluster.settle()
    cluster.restart(Config(enabled=False))
    await cluster.delete_device(device)
    await cluster.settle()
    assert cluster.client.peek(GPUDevice, device) is None


async def test_a_disabled_binder_resyncs_while_a_deleted_device_awaits_its_vmi() -> None:
    cluster = Cluster()
    cluster.gpu_class()
    cluster.node("node-a", 1)
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    cluster.restart(Config(enabled=False))
    assert (await cluster.run()).requeue_after is None, "nothing to wait for"
    await cluster.delete_device(gpu_name("node-a", 0))
    result = await cluster.run()
    assert result.requeue_after == cluster.config.resync
    assert FINALIZER in cluster.device(gpu_name("node-a", 0)).metadata.finalizers


async def test_release_of_a_deleted_device_runs_even_when_a_placement_write_conflicted(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b", 1)
    await cluster.settle()
    [doomed] = cluster.free_on("node-b")
    cluster.vm("vm", 2)
    # A concurrent writer wins the race for the device the order is about to take.
    cluster.client.conflict_next_write(GPUDevice, gpu_name("node-a", 0))
    await cluster.delete_device(doomed)
    result = await cluster.run()
    assert result.aborted and result.conflicts == 1
    assert cluster.client.peek(GPUDevice, doomed) is None
