"""Sets: each VM's devices are normalized to what it orders, on one node."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.api.types import Binding, BindReason, GPUDevice, ObjectRef, Phase

from .cluster import NAMESPACE, Cluster, gpu_name


def bind_by_hand(cluster: Cluster, device: str, vm: str) -> None:
    """A binding made by an earlier binder (or a bug): the world as it was found."""
    d = cluster.device(device)
    binding = Binding(
        vm=ObjectRef(namespace=NAMESPACE, name=vm, uid=cluster.vm_uid(vm)),
        bound_at=cluster.clock.now - timedelta(hours=1),
        reason=BindReason.ORDER,
    )
    status = d.status.model_copy(update={"binding": binding, "phase": Phase.BOUND})
    cluster.client.put(d.model_copy(update={"status": status}))


async def test_the_devices_of_a_deleted_vm_are_released(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2)
    await cluster.settle()
    devices = cluster.set_of("vm")
    await cluster.delete_vm("vm")
    await cluster.settle()
    for name in devices:
        d = cluster.device(name)
        assert d.status.binding is None
        assert d.status.phase == Phase.CLEANING
    assert all("its VM was deleted" in e.message for e in cluster.events_of("vm", "GPUReleased"))


async def test_devices_beyond_the_ordered_count_leave_the_set(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 4)
    await cluster.settle()
    before = cluster.set_of("vm")
    cluster.vm("vm", 2)
    await cluster.settle()
    after = cluster.set_of("vm")
    assert len(after) == 2 and set(after) < set(before)
    assert all(cluster.phase(n) == Phase.CLEANING for n in set(before) - set(after))


async def test_devices_on_a_second_node_leave_the_set_which_is_completed_on_its_node(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", 3)
    await cluster.settle()
    home = cluster.node_of("vm")
    away = "node-b" if home == "node-a" else "node-a"
    strays = cluster.set_of("vm")[:1]
    # One device of the set is found on the other node, as after a crash mid-move.
    cluster.client.put(_unbound(cluster.device(strays[0])))
    bind_by_hand(cluster, gpu_name(away, 7), "vm")
    await cluster.settle()
    assert cluster.node_of("vm") == home
    assert len(cluster.set_of("vm")) == 3
    assert cluster.phase(gpu_name(away, 7)) == Phase.CLEANING


async def test_a_device_in_use_by_a_live_vmi_stays_in_the_set_beyond_the_count(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    assert cluster.set_of("vm") == devices, "the running tenant is not disturbed"
    await cluster.stop("vm")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1


def _unbound(d: GPUDevice) -> GPUDevice:
    status = d.status.model_copy(update={"binding": None, "phase": Phase.AVAILABLE})
    return d.model_copy(update={"status": status})


async def test_a_requested_set_beyond_its_vms_order_waits_for_the_vmi_it_was_bound_for(
    cluster: Cluster,
) -> None:
    """The request's order is the VMI's spec, which may name GPUs its VM does not (a VMI
    the tenant made, owned by its GPU-less VM): the set waits for that VMI, which then
    holds it, rather than going to Cleaning before the VMI is seen."""
    cluster.node("node-a")
    cluster.vm("vm", 0, running=True)
    await cluster.settle()
    cluster.request("vm", 2, name="forged-bind")
    await cluster.answer_requests()
    answer = cluster.answer("forged-bind").status
    await cluster.settle_after(seconds=5)  # the VMI is still on its way
    assert cluster.set_of("vm") == sorted(answer.devices)
    cluster.start("vm", node=answer.node_name, devices=answer.devices)
    await cluster.settle_after(seconds=60)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)


async def test_a_requested_set_whose_vmi_never_came_goes_after_twice_the_bind_timeout(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 0, running=True)
    await cluster.settle()
    cluster.request("vm", 2)
    await cluster.answer_requests()
    await cluster.settle_after(seconds=9)
    assert len(cluster.set_of("vm")) == 2
    await cluster.settle_after(seconds=1)
    assert cluster.set_of("vm") == []


async def test_the_pass_after_a_requested_set_is_held_comes_when_the_wait_ends(
    cluster: Cluster,
) -> None:
    """No event announces a VMI that never comes: the pass is requeued for the wait's end,
    not the next resync."""
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    result = await cluster.run()
    assert result.requeue_after == 2 * cluster.config.bind_timeout
