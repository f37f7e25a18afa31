"""Events: every decision a user would ask "why?" about is an Event, with the reason."""

from __future__ import annotations

from gpu_binder.api.kinds import Event
from gpu_binder.binder.events import ClientRecorder
from gpu_binder.binder.reconciler import Reconciler

from .cluster import Cluster


async def test_a_bind_is_an_event_on_the_vm_naming_device_node_and_policy(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    [event] = cluster.events_of("vm", "GPUOrder")
    assert event.kind == "VirtualMachine" and event.uid == cluster.vm_uid("vm")
    assert event.message == "bound node-a-0000-10-00-0 on node-a: 1 × h100 placed by policy Pack"


async def test_an_unplaceable_order_is_said_once_until_something_changes(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 1)
    cluster.vm("vm", 2)
    for _ in range(3):
        await cluster.settle_after(seconds=30)
    [event] = cluster.events_of("vm", "GPUUnplaceable")
    assert event.type == "Warning"
    assert event.message == ("cannot bind: 2 × h100 requested; the largest free set is 1 on node-a")


async def test_events_are_written_as_kubernetes_events_regarding_the_vm(
    cluster: Cluster,
) -> None:
    cluster.binder = Reconciler(
        cluster.client,
        cluster.world,
        cluster.config,
        clock=cluster.clock,
        recorder=ClientRecorder(cluster.client),
    )
    cluster.node("node-a", 1)
    cluster.vm("vm", 1)
    await cluster.settle()
    [event] = [e for e in cluster.client.objects(Event) if e.reason == "GPUOrder"]
    assert event.metadata.namespace == "tenant"
    assert event.regarding["kind"] == "VirtualMachine"
    assert event.regarding["name"] == "vm"
    assert event.regarding["uid"] == cluster.vm_uid("vm")
    assert "on node-a" in event.note
    assert event.action == "Bind"
    await cluster.delete_vm("vm")
    await cluster.settle()
    [released] = [e for e in cluster.client.objects(Event) if e.reason == "GPUReleased"]
    assert released.action == "Release"


async def test_device_events_are_recorded_on_the_device(cluster: Cluster) -> None:
    [device] = cluster.node("node-a", 1)
    await cluster.settle()
    cluster.set_health(device, False, "Xid 79")
    await cluster.settle()
    await cluster.settle_after(minutes=5)
    [event] = cluster.events_of(device, "GPULost")
    assert event.kind == "GPUDevice" and event.type == "Warning"
    assert event.message == "unhealthy: Xid 79"
