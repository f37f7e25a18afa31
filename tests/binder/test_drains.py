"""A set stays on one node; and a GPU VMI, which cannot live-migrate, blocks a node drain
under evictionStrategy LiveMigrate or External: the binder says so, on the VM and on the
node's GPUs, while the node is cordoned."""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kinds import KubeVirt
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import Condition
from gpu_binder.api.types import Phase
from gpu_binder.sim.builders import kubevirt_object

from .cluster import Cluster

DRAIN = "DrainBlocked"


async def running(cluster: Cluster, strategy: str | None = None) -> list[str]:
    """vm runs on node-a, pinned to its set; its VMI says evictionStrategy `strategy`."""
    cluster.node("node-a", 2)
    cluster.node("node-b", 2)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    if strategy is not None:
        vmi_spec(cluster, evictionStrategy=strategy)
    await cluster.settle()
    return cluster.set_of("vm")


def vmi_spec(cluster: Cluster, **spec: Any) -> None:
    raw = cluster.vmi("vm").to_dict()
    raw["spec"] = {**raw["spec"], **spec}
    cluster.client.put(VirtualMachineInstance.from_dict(raw))


def vmi_status(cluster: Cluster, **status: Any) -> None:
    raw = cluster.vmi("vm").to_dict()
    raw["status"] = {**raw["status"], **status}
    cluster.client.put(VirtualMachineInstance.from_dict(raw))


def drain_condition(cluster: Cluster, device: str) -> Condition | None:
    return next((c for c in cluster.device(device).status.conditions if c.type == DRAIN), None)


# --- one node ---------------------------------------------------------------------------


async def test_a_pinned_vmi_reporting_another_node_keeps_its_set_where_it_is(
    cluster: Cluster,
) -> None:
    devices = await running(cluster)
    vmi_status(cluster, nodeName="node-b")
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)
    assert cluster.free_on("node-b") and len(cluster.free_on("node-b")) == 2
    assert cluster.events_of("vm", "GPUAdopted") == []


async def test_a_migration_state_naming_another_node_moves_nothing(cluster: Cluster) -> None:
    devices = await running(cluster)
    vmi_status(
        cluster,
        migrationState={"sourceNode": "node-a", "targetNode": "node-b", "completed": True},
        nodeName="node-b",
    )
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert len(cluster.free_on("node-b")) == 2


# --- drains -----------------------------------------------------------------------------


async def test_a_live_migrate_gpu_vmi_on_a_cordoned_node_is_said_to_block_its_drain(
    cluster: Cluster,
) -> None:
    devices = await running(cluster, "LiveMigrate")
    cluster.cordon("node-a")
    await cluster.settle()
    [event] = cluster.events_of("vm", "GPUDrainBlocked")
    assert event.type == "Warning" and "node-a" in event.message
    for name in devices:
        cond = drain_condition(cluster, name)
        assert cond is not None and cond.status == "True"
        assert "tenant/vm" in cond.message and "LiveMigrate" in cond.message


async def test_an_external_eviction_strategy_blocks_the_drain_too(cluster: Cluster) -> None:
    devices = await running(cluster, "External")
    cluster.cordon("node-a")
    await cluster.settle()
    assert drain_condition(cluster, devices[0]) is not None


async def test_the_kubevirt_crs_eviction_strategy_counts_for_a_vmi_that_sets_none(
    cluster: Cluster,
) -> None:
    raw = kubevirt_object()
    raw["spec"]["configuration"]["evictionStrategy"] = "LiveMigrate"
    cluster.client.put(KubeVirt.from_dict(raw))
    devices = await running(cluster)
    cluster.cordon("node-a")
    await cluster.settle()
    assert drain_condition(cluster, devices[0]) is not None


async def test_a_vmi_of_eviction_strategy_none_blocks_no_drain(cluster: Cluster) -> None:
    devices = await running(cluster, "None")
    cluster.cordon("node-a")
    await cluster.settle()
    assert drain_condition(cluster, devices[0]) is None
    assert cluster.events_of("vm", "GPUDrainBlocked") == []


async def test_live_migrate_if_possible_blocks_no_drain(cluster: Cluster) -> None:
    """KubeVirt lets such a pod be evicted: the VMI shuts down and its set may move."""
    devices = await running(cluster, "LiveMigrateIfPossible")
    cluster.cordon("node-a")
    await cluster.settle()
    assert drain_condition(cluster, devices[0]) is None


async def test_a_node_not_cordoned_shows_no_blocked_drain(cluster: Cluster) -> None:
    devices = await running(cluster, "LiveMigrate")
    await cluster.settle_after(seconds=31)
    assert drain_condition(cluster, devices[0]) is None


async def test_the_blocked_drain_is_said_no_more_once_the_node_is_uncordoned(
    cluster: Cluster,
) -> None:
    devices = await running(cluster, "LiveMigrate")
    cluster.cordon("node-a")
    await cluster.settle()
    cluster.cordon("node-a", False)
    await cluster.settle()
    assert all(drain_condition(cluster, n) is None for n in devices)


async def test_the_blocked_drain_is_said_no_more_once_the_vmi_ended(cluster: Cluster) -> None:
    devices = await running(cluster, "LiveMigrate")
    cluster.cordon("node-a")
    await cluster.settle()
    cluster.finish("vm")
    await cluster.settle()
    assert all(drain_condition(cluster, n) is None for n in devices)


async def test_a_blocked_drain_is_said_once_not_on_every_resync(cluster: Cluster) -> None:
    await running(cluster, "LiveMigrate")
    cluster.cordon("node-a")
    for _ in range(3):
        await cluster.settle_after(seconds=31)
    assert len(cluster.events_of("vm", "GPUDrainBlocked")) == 1
