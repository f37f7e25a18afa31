"""Moves: a set with no live VMI leaves a node that cannot serve it; never with a live VMI."""

from __future__ import annotations

from gpu_binder.api.types import BindReason, Phase

from .cluster import Cluster


async def stopped_set(cluster: Cluster, gpus: int = 2) -> tuple[str, list[str]]:
    """A stopped VM holding a set on node-a; node-b and node-c are empty."""
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.node("node-c")
    cluster.vm("vm", gpus)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    return "node-a", cluster.set_of("vm")


def moved_by(cluster: Cluster, why: str) -> None:
    devices = cluster.set_of("vm")
    reasons = {b.reason for n in devices if (b := cluster.device(n).status.binding)}
    assert reasons == {BindReason.MOVE}
    moves = cluster.events_of("vm", "GPUMove")
    assert moves and all(why in e.message for e in moves), [e.message for e in moves]


async def test_a_set_moves_off_a_cordoned_node(cluster: Cluster) -> None:
    node, old = await stopped_set(cluster)
    cluster.cordon(node)
    await cluster.settle()
    assert cluster.node_of("vm") != node
    assert len(cluster.set_of("vm")) == 2
    assert all(cluster.phase(n) == Phase.CLEANING for n in old)
    moved_by(cluster, "node node-a is cordoned")


async def test_a_set_moves_off_a_node_that_is_not_ready(cluster: Cluster) -> None:
    node, _ = await stopped_set(cluster)
    cluster.set_ready(node, False)
    await cluster.settle()
    assert cluster.node_of("vm") != node
    moved_by(cluster, "node node-a is not Ready")


async def test_a_set_moves_whole_when_one_of_its_devices_is_unschedulable(
    cluster: Cluster,
) -> None:
    node, old = await stopped_set(cluster)
    cluster.set_unschedulable(old[0])
    await cluster.settle()
    assert cluster.node_of("vm") != node
    assert len(cluster.set_of("vm")) == 2
    moved_by(cluster, f"device {old[0]} is marked unschedulable")


async def test_a_set_moves_to_the_node_its_vm_asks_for(cluster: Cluster) -> None:
    await stopped_set(cluster)
    cluster.annotate_vm("vm", "node-c")
    await cluster.settle()
    assert cluster.node_of("vm") == "node-c"
    moved_by(cluster, "the VM asks for node node-c")


async def test_a_set_already_on_the_node_its_vm_asks_for_stays(cluster: Cluster) -> None:
    _, old = await stopped_set(cluster)
    cluster.annotate_vm("vm", "node-a")
    await cluster.settle()
    assert cluster.set_of("vm") == old


async def test_a_set_with_a_live_vmi_never_moves(cluster: Cluster) -> None:
    node, old = await stopped_set(cluster)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    cluster.cordon(node)
    cluster.annotate_vm("vm", "node-b")
    await cluster.settle_after(hours=1)
    assert cluster.set_of("vm") == old
    assert all(cluster.phase(n) == Phase.ATTACHED for n in old)


async def test_a_set_held_by_a_vmi_not_yet_scheduled_never_moves(cluster: Cluster) -> None:
    node, old = await stopped_set(cluster)
    cluster.start("vm", node="", phase="Scheduling")
    cluster.cordon(node)
    await cluster.settle()
    assert cluster.set_of("vm") == old


async def test_a_held_set_moves_once_its_vmi_ends(cluster: Cluster) -> None:
    node, _ = await stopped_set(cluster)
    cluster.set_running("vm", True)
    cluster.start("vm")
    await cluster.settle()
    cluster.cordon(node)
    await cluster.settle()
    await cluster.stop("vm")
    await cluster.settle()
    assert cluster.node_of("vm") != node


async def test_a_move_with_nowhere_to_go_leaves_the_set_and_says_why(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b", 1)
    cluster.vm("vm", 2)
    await cluster.settle()
    old = cluster.set_of("vm")
    cluster.cordon("node-a")
    await cluster.settle()
    assert cluster.set_of("vm") == old
    [blocked] = cluster.events_of("vm", "GPUMoveBlocked")
    assert blocked.type == "Warning"
    assert "node node-a is cordoned" in blocked.message
    assert "the largest free set is 1 on node-b" in blocked.message


async def test_a_cordoned_node_takes_no_new_sets(cluster: Cluster) -> None:
    cluster.node("node-a", 4)
    cluster.node("node-b", 8)
    cluster.cordon("node-a")
    cluster.vm("vm", 2)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-b"
