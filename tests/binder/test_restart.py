"""A restarted binder (new World listed from the API, empty memory) keeps every decision."""

from __future__ import annotations

from gpu_binder.api.types import Phase

from .cluster import Cluster, gpu_name
from .test_status import degraded_condition


async def test_a_restarted_binder_keeps_every_set(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("running", 2, running=True)
    cluster.vm("stopped", 3)
    await cluster.settle()
    cluster.start("running")
    await cluster.settle()
    sets = {vm: cluster.set_of(vm) for vm in ("running", "stopped")}
    cluster.restart()
    await cluster.settle_after(minutes=1)
    assert {vm: cluster.set_of(vm) for vm in sets} == sets


async def test_a_lost_device_stays_lost_across_a_restart(cluster: Cluster) -> None:
    [device] = cluster.node("node-a", 1)
    await cluster.settle()
    cluster.set_health(device, False)
    await cluster.settle()
    await cluster.settle_after(minutes=5)
    assert cluster.phase(device) == Phase.LOST
    cluster.restart()
    await cluster.settle()
    assert cluster.phase(device) == Phase.LOST
    assert cluster.events_of(device, "GPURecovered") == []


async def test_the_devices_of_a_gone_node_stay_lost_across_a_restart(cluster: Cluster) -> None:
    devices = cluster.node("node-a", 2)
    await cluster.settle()
    await cluster.remove_node("node-a")
    await cluster.settle()
    await cluster.settle_after(minutes=5)
    cluster.restart()
    await cluster.settle()
    assert [cluster.phase(n) for n in devices] == [Phase.LOST, Phase.LOST]


async def test_a_degraded_node_stays_degraded_across_a_restart(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 4)
    await cluster.settle()
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    cluster.restart()
    cluster.vm("vm", 1)
    await cluster.settle()
    assert degraded_condition(cluster, "node-a") == "True"
    assert cluster.phase(gpu_name("node-a", 3)) == Phase.LOST
    assert cluster.node_of("vm") == "node-b", "a degraded node takes no new sets"


async def test_a_node_that_recovered_while_the_binder_was_down_is_no_longer_degraded(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 4)
    await cluster.settle()
    cluster.serve("node-a", [0, 1, 2])
    await cluster.settle()
    await cluster.settle_after(minutes=2)
    cluster.serve("node-a", [0, 1, 2, 3])
    cluster.restart()
    await cluster.settle()
    assert degraded_condition(cluster, "node-a") == "False"
    assert cluster.phase(gpu_name("node-a", 3)) == Phase.CLEANING
