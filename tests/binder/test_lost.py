"""Lost devices: rebinds on the same node first, else the set moves whole; never while
a VMI runs on the set, whose tenant keeps its Lost GPU until the VMI ends."""

from __future__ import annotations

from gpu_binder.api.types import BindReason, Phase

from .cluster import Cluster


async def lose(cluster: Cluster, device: str) -> None:
    """The agent reports the device Unhealthy, for longer than lostGrace."""
    cluster.set_health(device, False, "Xid 79: GPU has fallen off the bus")
    await cluster.settle()
    await cluster.settle_after(minutes=5)


async def test_an_unhealthy_device_is_lost_only_after_the_lost_grace(cluster: Cluster) -> None:
    [device, *_] = cluster.node("node-a")
    await cluster.settle()
    cluster.set_health(device, False)
    await cluster.settle()
    await cluster.settle_after(minutes=4)
    assert cluster.phase(device) == Phase.AVAILABLE
    await cluster.settle_after(minutes=1)
    d = cluster.device(device)
    assert d.status.phase == Phase.LOST
    assert "unhealthy" in d.status.lost_reason
    assert cluster.events_of(device, "GPULost")


async def test_an_unhealthy_device_is_not_bound_even_before_it_is_lost(cluster: Cluster) -> None:
    [device, *_] = cluster.node("node-a", 2)
    await cluster.settle()
    cluster.set_health(device, False)
    cluster.vm("vm", 1)
    await cluster.settle()
    assert cluster.set_of("vm") != [device]


async def test_the_devices_of_a_node_not_ready_past_the_lost_grace_are_lost(
    cluster: Cluster,
) -> None:
    devices = cluster.node("node-a", 2)
    await cluster.settle()
    cluster.set_ready("node-a", False)
    await cluster.settle_after(minutes=5)
    assert all(cluster.device(n).status.lost_reason == "node node-a is not Ready" for n in devices)


async def test_the_devices_of_a_node_gone_past_the_lost_grace_are_lost(cluster: Cluster) -> None:
    devices = cluster.node("node-a", 2)
    await cluster.settle()
    await cluster.remove_node("node-a")
    await cluster.settle()
    await cluster.settle_after(minutes=5)
    assert all(cluster.phase(n) == Phase.LOST for n in devices)


async def test_a_stopped_set_with_a_lost_device_gets_a_healthy_one_on_the_same_node(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", 2)
    await cluster.settle()
    lost, kept = cluster.set_of("vm")
    await lose(cluster, lost)
    devices = cluster.set_of("vm")
    assert kept in devices and lost not in devices and len(devices) == 2
    assert cluster.node_of("vm") == "node-a"
    [new] = set(devices) - {kept}
    binding = cluster.device(new).status.binding
    assert binding is not None and binding.reason == BindReason.REBIND
    assert cluster.phase(lost) == Phase.LOST and cluster.bound_to(lost) is None
    [event] = cluster.events_of("vm", "GPURebind")
    assert "replaces a Lost device on node-a" in event.message


async def test_a_stopped_set_moves_whole_when_its_node_cannot_replace_a_lost_device(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 2)
    cluster.node("node-b")
    cluster.vm("vm", 2)
    await cluster.settle()
    old = cluster.set_of("vm")
    await lose(cluster, old[0])
    assert cluster.node_of("vm") == "node-b"
    assert len(cluster.set_of("vm")) == 2
    assert cluster.phase(old[1]) == Phase.CLEANING
    assert all("the set moved whole" in e.message for e in cluster.events_of("vm", "GPURebind"))


async def test_a_running_vm_keeps_its_lost_gpu_until_its_vmi_ends(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    await lose(cluster, devices[0])
    assert cluster.set_of("vm") == devices
    d = cluster.device(devices[0])
    assert d.status.phase == Phase.LOST and d.status.attachment is not None
    assert cluster.events_of("vm", "GPURebind") == []
    await cluster.stop("vm")
    await cluster.settle()
    assert devices[0] not in cluster.set_of("vm")
    assert cluster.node_of("vm") == "node-a"
    assert cluster.events_of("vm", "GPURebind")


async def test_a_running_vm_with_a_lost_gpu_does_not_churn_replacements(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    await lose(cluster, devices[0])
    for _ in range(3):
        await cluster.settle_after(seconds=30)
    assert cluster.events_of("vm", "GPUReleased") == []
    assert len(cluster.free_on("node-a")) == 2, "the node's free devices are untouched"


async def test_a_lost_device_recovers_through_cleaning_when_its_cause_clears(
    cluster: Cluster,
) -> None:
    [device, *_] = cluster.node("node-a", 1)
    await cluster.settle()
    await lose(cluster, device)
    assert cluster.phase(device) == Phase.LOST
    cluster.set_health(device, True)
    await cluster.settle()
    assert cluster.phase(device) == Phase.CLEANING
    cluster.clock.advance(seconds=5)
    cluster.reset(device)
    await cluster.settle()
    assert cluster.phase(device) == Phase.AVAILABLE
    assert cluster.events_of(device, "GPURecovered")


async def test_a_lost_device_still_in_a_set_recovers_into_it(cluster: Cluster) -> None:
    cluster.node("node-a", 2)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    await lose(cluster, devices[0])
    cluster.set_health(devices[0], True)
    await cluster.settle()
    assert cluster.phase(devices[0]) == Phase.ATTACHED
    assert cluster.set_of("vm") == devices


async def test_a_set_held_by_a_vmi_not_yet_scheduled_is_not_rebound(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.vm("vm", 2)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm", node="", phase="Scheduling")
    await lose(cluster, devices[0])
    assert cluster.set_of("vm") == devices
    assert cluster.events_of("vm", "GPURebind") == []
