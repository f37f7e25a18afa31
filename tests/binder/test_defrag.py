"""Defragmentation: an order that fits nowhere gets room by moving stopped VMs' sets —
never a running one — a few sets per pass, each move an Event saying why."""

from __future__ import annotations

from dataclasses import replace

from gpu_binder.api.types import BindReason
from gpu_binder.binder.steps.defrag import MOVES_PER_PASS

from .cluster import Cluster, gpu_name


async def park(cluster: Cluster, vm: str, gpus: int, node: str, running: bool = False) -> None:
    """A VM whose set sits on `node` (its owner asked for it, then let go)."""
    cluster.vm(vm, gpus, running=running)
    cluster.annotate_vm(vm, node)
    await cluster.settle()
    assert cluster.node_of(vm) == node
    cluster.annotate_vm(vm, None)
    await cluster.settle()


async def two_half_used_nodes(cluster: Cluster, running: bool = False) -> None:
    cluster.gpu_class(cleaning="None")
    cluster.node("node-a")
    cluster.node("node-b")
    await park(cluster, "parked-a", 2, "node-a", running)
    await park(cluster, "parked-b", 2, "node-b", running)


async def test_a_stopped_set_moves_to_make_room_for_a_whole_node_order(
    cluster: Cluster,
) -> None:
    await two_half_used_nodes(cluster)
    mark = len(cluster.events)
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    assert len(cluster.set_of("big")) == 8
    moved = "parked-a" if cluster.node_of("big") == "node-a" else "parked-b"
    assert cluster.node_of(moved) != cluster.node_of("big")
    for name in cluster.set_of(moved):
        binding = cluster.device(name).status.binding
        assert binding is not None and binding.reason == BindReason.MOVE
    [event] = [e for e in cluster.events[mark:] if e.name == moved and e.reason == "GPUMove"]
    assert "the VM is stopped and tenant/big (8 × h100) fits on no node as it is" in (event.message)
    [made] = cluster.events_of("big", "GPUMadeRoom")
    assert moved in made.message
    assert cluster.violations() == []


async def test_a_running_vms_set_is_never_moved(cluster: Cluster) -> None:
    await two_half_used_nodes(cluster, running=True)
    for vm in ("parked-a", "parked-b"):
        cluster.start(vm)
    await cluster.settle()
    before = {vm: cluster.set_of(vm) for vm in ("parked-a", "parked-b")}
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    assert cluster.set_of("big") == []
    assert {vm: cluster.set_of(vm) for vm in ("parked-a", "parked-b")} == before


async def test_a_vm_asking_for_its_node_is_not_moved(cluster: Cluster) -> None:
    await two_half_used_nodes(cluster)
    cluster.annotate_vm("parked-a", "node-a")
    cluster.annotate_vm("parked-b", "node-b")
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    assert cluster.set_of("big") == []


async def test_a_stopped_order_does_not_move_others(cluster: Cluster) -> None:
    await two_half_used_nodes(cluster)
    cluster.vm("big", 8, running=False)  # a reservation, not a VM that wants to start
    await cluster.settle()
    assert cluster.set_of("big") == []
    assert cluster.node_of("parked-a") == "node-a" and cluster.node_of("parked-b") == "node-b"


async def test_moves_are_bounded_per_pass_and_go_on_in_the_next(cluster: Cluster) -> None:
    cluster.gpu_class(cleaning="None")
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.node("node-c", 6)
    sets = MOVES_PER_PASS + 1
    for node in ("node-a", "node-b"):
        for i in range(sets):
            await park(cluster, f"{node}-{i}", 1, node)
    mark = len(cluster.events)
    cluster.vm("big", 8, running=True)
    await cluster.run()
    moved = [e for e in cluster.events[mark:] if e.reason == "GPUMove"]
    assert len(moved) == MOVES_PER_PASS
    assert cluster.set_of("big") == []
    await cluster.settle()
    assert len(cluster.set_of("big")) == 8
    assert len([e for e in cluster.events[mark:] if e.reason == "GPUMove"]) == sets
    assert len(cluster.events_of("big", "GPUMadeRoom")) == 2
    assert cluster.violations() == []


async def test_an_order_needing_more_moves_than_a_pass_allows_gets_them_over_passes(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(cleaning="None")
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.node("node-c", 2)
    small = MOVES_PER_PASS + 1
    for i in range(small):
        await park(cluster, f"a-{i}", 1, "node-a")
    for i in range(small - 2):
        await park(cluster, f"b-{i}", 1, "node-b")
    await park(cluster, "c", 1, "node-c")
    # Free: 3 on node-a, 5 on node-b, 1 on node-c; the 8-GPU order needs node-b cleared of
    # its 3 stopped sets (fewest), which fit on node-a.
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    assert cluster.node_of("big") == "node-b"
    assert len(cluster.events_of("big", "GPUMadeRoom")) == 1
    assert cluster.free_on("node-b") == []
    assert gpu_name("node-b", 0) in cluster.set_of("big")
    assert cluster.violations() == []


async def test_with_defrag_off_a_stopped_set_stays_and_the_order_waits(cluster: Cluster) -> None:
    cluster.restart(replace(cluster.config, defrag=False))
    await two_half_used_nodes(cluster)
    cluster.vm("big", 8, running=True)
    await cluster.settle()
    assert cluster.set_of("big") == []
    assert (cluster.node_of("parked-a"), cluster.node_of("parked-b")) == ("node-a", "node-b")
