"""A VMI being deleted still runs: its guest shuts down and QEMU holds the passthrough GPUs
until the launcher pod exits. It stays live until it reaches Succeeded/Failed or is gone."""

from __future__ import annotations

from datetime import datetime

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import Phase
from gpu_binder.sim.kubelet import VMI_FINALIZER

from .cluster import NAMESPACE, Cluster


async def running_on_node_a(cluster: Cluster, gpus: int = 2) -> list[str]:
    """vm runs on node-a with its set attached; node-b could take the set."""
    cluster.node("node-a")
    cluster.node("node-b")
    cluster.vm("vm", gpus, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    devices = cluster.set_of("vm")
    assert cluster.node_of("vm") == "node-a"
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)
    return devices


async def shut_down(cluster: Cluster, name: str = "vm") -> datetime:
    """KubeVirt deletes the VMI: its finalizer keeps it, Running, while the guest shuts down.
    Returns its deletionTimestamp."""
    raw = cluster.vmi(name).to_dict()
    raw["metadata"]["finalizers"] = [VMI_FINALIZER]
    cluster.client.put(VirtualMachineInstance.from_dict(raw))
    await cluster.client.delete(VirtualMachineInstance, name, NAMESPACE)
    vmi = cluster.vmi(name)
    assert vmi.phase == "Running" and vmi.metadata.deletion_timestamp is not None
    return vmi.metadata.deletion_timestamp


async def gone(cluster: Cluster, name: str = "vm") -> None:
    """KubeVirt lets the VMI go: its finalizer removed, the object leaves the API."""
    vmi = cluster.vmi(name)
    raw = vmi.to_dict()
    raw["metadata"]["finalizers"] = []
    await cluster.client.update(VirtualMachineInstance.from_dict(raw))
    assert cluster.client.peek(VirtualMachineInstance, name, NAMESPACE) is None


async def test_a_vmi_shutting_down_keeps_its_set_attached_on_a_cordoned_node(
    cluster: Cluster,
) -> None:
    devices = await running_on_node_a(cluster)
    vmi = cluster.vmi("vm")
    cluster.set_running("vm", False)
    await shut_down(cluster)
    cluster.cordon("node-a")
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("vm") == devices
    for name in devices:
        d = cluster.device(name)
        assert d.status.phase == Phase.ATTACHED
        assert d.status.attachment is not None
        assert d.status.attachment.vmi.uid == vmi.metadata.uid
    assert cluster.events_of("vm", "GPUMove") == []
    assert [r.spec.end for r in cluster.records()] == [None, None]


async def test_a_vmi_shutting_down_keeps_its_set_when_its_vm_is_deleted(
    cluster: Cluster,
) -> None:
    devices = await running_on_node_a(cluster)
    await shut_down(cluster)
    await cluster.delete_vm("vm")
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("vm") == devices
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)
    await gone(cluster)
    await cluster.settle()
    assert cluster.set_of("vm") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in devices)


async def test_once_it_succeeds_the_set_moves_and_the_record_closes_at_its_finish(
    cluster: Cluster,
) -> None:
    devices = await running_on_node_a(cluster)
    cluster.set_running("vm", False)
    await shut_down(cluster)
    cluster.cordon("node-a")
    await cluster.settle_after(seconds=30)
    finished = cluster.clock.advance(seconds=45)
    cluster.finish("vm", at=finished)
    await cluster.settle_after(seconds=5)
    assert cluster.node_of("vm") == "node-b"
    assert all(cluster.phase(n) == Phase.CLEANING for n in devices)
    assert [r.spec.end for r in cluster.records()] == [finished, finished]


async def test_once_it_is_gone_the_record_closes_then_not_when_its_deletion_began(
    cluster: Cluster,
) -> None:
    await running_on_node_a(cluster)
    began = await shut_down(cluster)
    await cluster.settle_after(seconds=30)
    ended = cluster.clock.advance(seconds=60)
    await gone(cluster)  # forced: it never said Succeeded
    await cluster.settle()
    assert [r.spec.end for r in cluster.records()] == [ended, ended]
    assert ended > began


async def test_a_stopped_vm_keeps_its_set_for_release_after_stopped_from_its_vmis_end(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(release_after="10m")
    devices = await running_on_node_a(cluster)
    cluster.set_running("vm", False)
    await shut_down(cluster)
    await cluster.settle_after(minutes=8)  # a long shutdown
    assert cluster.set_of("vm") == devices
    cluster.finish("vm")
    await gone(cluster)
    await cluster.settle_after(minutes=9)
    assert cluster.set_of("vm") == devices, "10 minutes from the end, not from the deletion"
    await cluster.settle_after(minutes=1)
    assert cluster.set_of("vm") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in devices)


async def test_a_standalone_vmi_shutting_down_keeps_its_set_until_it_ends(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    answer = cluster.answer("solo-bind").status
    cluster.start("solo", node=answer.node_name, devices=answer.devices, owned=False)
    await cluster.settle()
    await shut_down(cluster, "solo")
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("solo") == list(answer.devices)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)
    cluster.finish("solo")
    await gone(cluster, "solo")
    await cluster.settle()
    assert cluster.set_of("solo") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in answer.devices)


async def test_a_standalone_vmi_being_deleted_before_it_ran_gets_no_set(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.start("solo", node="", phase="Pending", devices=(), owned=False, gpus=2)
    raw = cluster.vmi("solo").to_dict()
    raw["metadata"]["finalizers"] = [VMI_FINALIZER]
    cluster.client.put(VirtualMachineInstance.from_dict(raw))
    await cluster.client.delete(VirtualMachineInstance, "solo", NAMESPACE)
    await cluster.settle_after(minutes=1)
    assert cluster.set_of("solo") == []
    assert cluster.events_of("solo", "GPUOrder") == []
