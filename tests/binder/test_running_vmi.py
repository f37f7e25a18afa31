"""A running VMI is the truth, not its VM's template: what it was admitted with (its spec,
which no tenant can change) decides what it holds until it ends."""

from __future__ import annotations

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUClass, GPUClassSpec, Phase

from .cluster import (
    A100,
    A100_DEVICE_ID,
    A100_RESOURCE,
    H100,
    H100_DEVICE_ID,
    Cluster,
    gpu_name,
)


async def running(cluster: Cluster, gpus: int = 1) -> list[str]:
    """vm runs on node-a with its set of `gpus`, admitted with it."""
    cluster.node("node-a")
    cluster.vm("vm", gpus, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    return cluster.set_of("vm")


async def test_raising_the_count_of_a_running_vm_binds_nothing_until_its_vmi_ends(
    cluster: Cluster,
) -> None:
    devices = await running(cluster, 1)
    cluster.vm("vm", 2, running=True)
    for _ in range(4):
        await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert cluster.events_of("vm", "GPUAdopted") == []
    assert len(cluster.records()) == 1


async def test_a_raised_count_is_bound_once_the_vmi_ended(cluster: Cluster) -> None:
    devices = await running(cluster, 1)
    cluster.vm("vm", 2, running=True)
    await cluster.settle_after(seconds=31)
    cluster.finish("vm")
    await cluster.remove_vmi("vm")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2
    assert set(devices) < set(cluster.set_of("vm"))


async def test_lowering_the_count_of_a_running_vm_releases_nothing_until_its_vmi_ends(
    cluster: Cluster,
) -> None:
    devices = await running(cluster, 2)
    cluster.vm("vm", 1, running=True)
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)


async def test_lowering_the_count_of_a_pending_vmi_releases_none_of_its_devices(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm", node="", phase="Scheduling", devices=devices)
    cluster.vm("vm", 1, running=True)
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices, "its launcher pod will ask for both slots"


async def test_another_class_in_a_running_vms_template_changes_nothing_until_it_ends(
    cluster: Cluster,
) -> None:
    cluster.gpu_class(A100, resource=A100_RESOURCE, device_id=A100_DEVICE_ID)
    cluster.node("node-b", class_name=A100)
    devices = await running(cluster, 1)
    cluster.vm("vm", 1, running=True, resource=A100_RESOURCE)
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert cluster.phase(devices[0]) == Phase.ATTACHED


async def test_the_devices_annotation_decides_nothing(cluster: Cluster) -> None:
    """A tenant can write its VMI's annotations; the spec it was admitted with is what the
    launcher pod holds."""
    devices = await running(cluster, 1)
    vmi = cluster.vmi("vm").to_dict()
    others = [n for n in cluster.free_on("node-a")][:3]
    vmi["metadata"]["annotations"] = {DEVICES_ANNOTATION: ",".join(others)}
    cluster.client.put(VirtualMachineInstance.from_dict(vmi))
    for _ in range(3):
        await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == devices
    assert cluster.phase(devices[0]) == Phase.ATTACHED
    assert all(cluster.phase(n) == Phase.AVAILABLE for n in others)


async def test_a_vmi_without_the_devices_annotation_attaches_what_its_spec_names(
    cluster: Cluster,
) -> None:
    devices = await running(cluster, 2)
    vmi = cluster.vmi("vm").to_dict()
    vmi["metadata"]["annotations"] = {}
    cluster.client.put(VirtualMachineInstance.from_dict(vmi))
    for _ in range(3):
        await cluster.settle_after(seconds=31)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)


async def test_adopting_a_pinned_vmi_takes_exactly_the_devices_its_slots_name(
    cluster: Cluster,
) -> None:
    """A VMI the webhook pinned to slots 5 and 6 whose set is gone (a binder that lost its
    state): its launcher pod holds those two GPUs, and adoption takes them, not others."""
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    pinned = [gpu_name("node-a", 5), gpu_name("node-a", 6)]
    cluster.start("vm", node="node-a", devices=pinned)
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == sorted(pinned)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in pinned)


async def test_a_pinned_vmi_whose_slot_is_bound_to_another_vm_adopts_nothing_and_says_so(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 1)
    cluster.vm("other", 1, running=True)
    await cluster.settle()
    [taken] = cluster.set_of("other")
    cluster.vm("vm", 1, running=True)
    cluster.start("vm", node="node-a", devices=[taken])
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("other") == [taken]
    assert cluster.set_of("vm") == []
    [event] = cluster.events_of("vm", "GPUUnmanaged")
    assert taken in event.message


async def test_a_standalone_vmi_of_a_class_matching_every_device_id_keeps_its_gpus(
    cluster: Cluster,
) -> None:
    """A class with `deviceIDs: []` matches the vendor's every device: its slots name the
    device's own vendor:device, which no prefix of the class can say."""
    await cluster.client.delete(GPUClass, H100)
    body = {"resourceName": "nvidia.com/ANY", "match": {"vendorID": "0x10de", "deviceIDs": []}}
    cluster.client.put(
        GPUClass(metadata=ObjectMeta(name="any"), spec=GPUClassSpec.model_validate(body))
    )
    cluster.device_ids["any"] = H100_DEVICE_ID
    cluster.node("node-a", class_name="any")
    await _standalone_keeps_its_gpus(cluster, "any", "nvidia.com/ANY")


async def test_a_standalone_vmi_of_classes_split_by_node_selector_keeps_its_gpus(
    cluster: Cluster,
) -> None:
    """Two classes of one vendor:device, one per node pool: the slot's device says which."""
    await cluster.client.delete(GPUClass, H100)
    cluster.gpu_class("pool-a", resource="nvidia.com/POOL_A", node_selector={"pool": "a"})
    cluster.gpu_class("pool-b", resource="nvidia.com/POOL_B", node_selector={"pool": "b"})
    cluster.node("node-b", class_name="pool-b", labels={"pool": "b"})
    await _standalone_keeps_its_gpus(cluster, "pool-b", "nvidia.com/POOL_B", node="node-b")


async def _standalone_keeps_its_gpus(
    cluster: Cluster, class_name: str, resource: str, node: str = "node-a"
) -> None:
    await cluster.settle()
    cluster.request("solo", 2, class_name)
    await cluster.answer_requests()
    answer = cluster.answer("solo-bind").status
    assert len(answer.devices) == 2, answer.message
    cluster.start("solo", node=node, devices=answer.devices, owned=False, resource=resource)
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("solo") == list(answer.devices)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)
    assert {r.spec.class_name for r in cluster.records()} == {class_name}
    assert cluster.events_of("solo", "GPUUnmanaged") == [], "its order is what it runs with"
