"""Attachments: which bound devices a live VMI uses; adoption of VMIs running unmanaged."""

from __future__ import annotations

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import BindReason, Phase
from gpu_binder.binder.steps.attachments import AttachmentsMemory

from .cluster import NAMESPACE, Cluster


async def bound_vm(cluster: Cluster, name: str = "vm", gpus: int = 2) -> list[str]:
    cluster.vm(name, gpus, running=True)
    await cluster.settle()
    return cluster.set_of(name)


async def test_a_running_vmi_attaches_the_devices_of_its_set(cluster: Cluster) -> None:
    cluster.node("node-a")
    devices = await bound_vm(cluster)
    vmi = cluster.start("vm")
    await cluster.settle()
    for name in devices:
        d = cluster.device(name)
        assert d.status.phase == Phase.ATTACHED
        assert d.status.attachment is not None
        assert d.status.attachment.vmi.uid == vmi.metadata.uid


async def test_a_vmi_not_yet_scheduled_attaches_nothing(cluster: Cluster) -> None:
    cluster.node("node-a")
    devices = await bound_vm(cluster)
    cluster.start("vm", node="", phase="Scheduling")
    await cluster.settle()
    assert [cluster.phase(n) for n in devices] == [Phase.BOUND, Phase.BOUND]


async def test_a_vmi_attaches_only_the_devices_it_was_admitted_with(cluster: Cluster) -> None:
    cluster.node("node-a")
    first, second = await bound_vm(cluster)
    cluster.start("vm", devices=[first])
    await cluster.settle()
    assert cluster.phase(first) == Phase.ATTACHED
    assert cluster.phase(second) == Phase.BOUND


async def test_a_vmi_that_ended_detaches_its_devices_which_stay_bound(cluster: Cluster) -> None:
    cluster.node("node-a")
    devices = await bound_vm(cluster)
    cluster.start("vm")
    await cluster.settle()
    cluster.clock.advance(minutes=5)
    cluster.finish("vm")
    await cluster.settle()
    for name in devices:
        d = cluster.device(name)
        assert d.status.phase == Phase.BOUND
        assert d.status.attachment is None
        assert cluster.bound_to(name) == "vm"


async def test_a_stopped_vm_keeps_its_gpus_across_restarts(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.node("node-b")
    devices = await bound_vm(cluster)
    for _ in range(3):
        cluster.set_running("vm", True)
        cluster.start("vm")
        await cluster.settle_after(minutes=1)
        await cluster.stop("vm")
        await cluster.settle_after(hours=1)
        assert cluster.set_of("vm") == devices


# --- adoption --------------------------------------------------------------------------


async def unmanaged(cluster: Cluster, node_b_gpus: int = 8) -> VirtualMachineInstance:
    """vm's set is on node-a, but its VMI runs on node-b: the webhook never saw it."""
    cluster.node("node-a")
    cluster.node("node-b", node_b_gpus)
    cluster.vm("vm", 2)
    await cluster.settle()
    assert cluster.node_of("vm") == "node-a"
    vmi = cluster.start("vm", node="node-b", devices=())
    await cluster.settle()
    return vmi


async def test_an_unmanaged_vmi_is_not_adopted_within_the_attachment_grace(
    cluster: Cluster,
) -> None:
    await unmanaged(cluster)
    await cluster.settle_after(seconds=29)
    assert cluster.node_of("vm") == "node-a"
    assert cluster.events_of("vm", "GPUAdopted") == []


async def test_an_unmanaged_vmi_is_adopted_after_the_attachment_grace(cluster: Cluster) -> None:
    vmi = await unmanaged(cluster)
    await cluster.settle_after(seconds=30)
    adopted = cluster.set_of("vm")
    assert len(adopted) == 2
    assert cluster.node_of("vm") == "node-b"
    for name in adopted:
        d = cluster.device(name)
        assert d.status.phase == Phase.ATTACHED
        assert d.status.binding is not None and d.status.binding.reason == BindReason.ADOPTED
        assert d.status.attachment is not None
        assert d.status.attachment.vmi.uid == vmi.metadata.uid
    [event, *_] = cluster.events_of("vm", "GPUAdopted")
    assert "already running on node-b" in event.message


async def test_adopting_leaves_the_vmi_untouched(cluster: Cluster) -> None:
    vmi = await unmanaged(cluster)
    await cluster.settle_after(seconds=30)
    assert cluster.vmi("vm").metadata.resource_version == vmi.metadata.resource_version


async def test_an_adopted_set_gives_up_its_devices_on_the_old_node(cluster: Cluster) -> None:
    await unmanaged(cluster)
    old = cluster.set_of("vm")
    await cluster.settle_after(seconds=30)
    assert cluster.node_of("vm") == "node-b"
    assert [cluster.phase(n) for n in old] == [Phase.CLEANING, Phase.CLEANING]


async def test_adoption_is_refused_with_an_event_when_the_node_has_no_free_device(
    cluster: Cluster,
) -> None:
    vmi = await unmanaged(cluster, node_b_gpus=1)
    await cluster.settle_after(seconds=30)
    assert cluster.node_of("vm") == "node-a", "the set stays where it was"
    [event] = cluster.events_of("vm", "GPUUnmanaged")
    assert event.type == "Warning"
    assert "node-b" in event.message and "only 1 free" in event.message
    assert cluster.vmi("vm").metadata.resource_version == vmi.metadata.resource_version
    assert cluster.binder.metrics.unmanaged._value.get() == 1


async def test_a_refused_adoption_is_said_once_not_on_every_resync(cluster: Cluster) -> None:
    await unmanaged(cluster, node_b_gpus=1)
    for _ in range(3):
        await cluster.settle_after(seconds=30)
    assert len(cluster.events_of("vm", "GPUUnmanaged")) == 1


async def test_a_standalone_vmi_is_its_own_order_and_is_released_when_it_ends(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.start("solo", node="node-a", devices=(), owned=False, gpus=2)
    await cluster.settle()
    assert cluster.set_of("solo") == [], "unmanaged: adopted only after the grace"
    await cluster.settle_after(seconds=30)
    devices = cluster.set_of("solo")
    assert len(devices) == 2
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)
    cluster.finish("solo")
    await cluster.settle()
    assert cluster.set_of("solo") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in devices)
    assert cluster.vmi("solo").metadata.namespace == NAMESPACE


async def test_a_vm_running_unmanaged_gets_no_set_on_another_node_meanwhile(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 3)
    cluster.node("node-b")
    cluster.vm("vm", 2, running=True)
    cluster.start("vm", node="node-b", devices=())
    await cluster.settle()
    assert cluster.set_of("vm") == []
    await cluster.settle_after(seconds=30)
    assert cluster.node_of("vm") == "node-b"
    assert cluster.events_of("vm", "GPUReleased") == [], "nothing bound in vain, nothing cleaned"


async def test_a_standalone_vmi_admitted_with_its_set_keeps_and_attaches_it(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    answer = cluster.answer("solo-bind").status
    cluster.start("solo", node=answer.node_name, devices=answer.devices, owned=False)
    await cluster.settle()
    assert cluster.set_of("solo") == list(answer.devices)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)
    assert len(cluster.records()) == 2


async def test_a_standalone_set_survives_the_pass_between_its_answer_and_its_vmi(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    answer = cluster.answer("solo-bind").status
    await cluster.settle()  # the webhook has not returned yet: no VMI so far
    assert cluster.set_of("solo") == list(answer.devices)
    cluster.start("solo", node=answer.node_name, devices=answer.devices, owned=False)
    await cluster.settle()
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)


async def test_a_standalone_set_whose_vmi_never_came_is_released_within_seconds(
    cluster: Cluster,
) -> None:
    """Not after attachmentGrace (30 s): a VMI the API server refused after the webhook
    admitted it never comes (steps.sets.vmi_arrival, twice the bind timeout)."""
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    await cluster.settle()
    await cluster.settle_after(seconds=10)
    assert cluster.set_of("solo") == []


async def test_a_refused_adoption_is_forgotten_when_its_vmi_ends(cluster: Cluster) -> None:
    await unmanaged(cluster, node_b_gpus=1)
    await cluster.settle_after(seconds=30)
    memory = cluster.binder.memory.of(AttachmentsMemory)
    assert memory.unmanaged_since and cluster.events_of("vm", "GPUUnmanaged")
    cluster.finish("vm")
    await cluster.settle()
    assert memory.unmanaged_since == {}


async def test_a_new_vmi_refused_adoption_as_its_predecessor_was_is_said_again(
    cluster: Cluster,
) -> None:
    await unmanaged(cluster, node_b_gpus=1)
    await cluster.settle_after(seconds=30)
    cluster.finish("vm")
    await cluster.settle()
    await cluster.remove_vmi("vm")
    cluster.start("vm", node="node-b", devices=())
    await cluster.settle()
    await cluster.settle_after(seconds=30)
    assert len(cluster.events_of("vm", "GPUUnmanaged")) == 2
