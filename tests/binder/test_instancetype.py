"""GPUs from instancetypes: a VM orders its template's GPU entries and, where the template
has none, its instancetype's, as KubeVirt recorded the instancetype in a ControllerRevision
for the VM — never the live instancetype object."""

from __future__ import annotations

from gpu_binder.api.instancetype import ControllerRevision, instancetype_revision_object
from gpu_binder.api.types import Phase

from .cluster import H100_RESOURCE, NAMESPACE, Cluster


async def test_a_vm_orders_the_gpus_of_its_recorded_instancetype(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2


async def test_a_vm_orders_the_gpus_of_its_recorded_cluster_instancetype(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2, kind="VirtualMachineClusterInstancetype")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2


async def test_the_set_a_request_bound_for_an_instancetype_vm_is_kept(cluster: Cluster) -> None:
    """The webhook asks for the VMI's GPUs, which KubeVirt took from the instancetype:
    the VM's order must say the same, or the set is released under the starting guest."""
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2, running=False)
    await cluster.settle()
    cluster.request("vm", 2)
    await cluster.answer_requests()
    answer = cluster.answer("vm-bind").status
    cluster.start("vm", node=answer.node_name, devices=answer.devices)
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("vm") == list(answer.devices)
    assert all(cluster.phase(n) == Phase.ATTACHED for n in answer.devices)
    assert len(cluster.records()) == 2


async def test_a_running_instancetype_vm_keeps_its_gpus_after_its_vmi_ends(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2)
    await cluster.settle()
    devices = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    cluster.finish("vm")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(hours=1)
    assert cluster.set_of("vm") == devices


async def test_the_template_gpus_win_over_the_instancetypes(cluster: Cluster) -> None:
    """KubeVirt copies the instancetype's gpus only into a VMI whose template has none
    (pkg/instancetype/apply/gpu.go; both is a conflict it refuses at the VM)."""
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 4)
    vm = cluster.client.peek(type(cluster.world.vms[f"{NAMESPACE}/vm"]), "vm", NAMESPACE)
    assert vm is not None
    raw = vm.to_dict()
    raw["spec"]["template"]["spec"]["domain"]["devices"]["gpus"] = [
        {"name": "g", "deviceName": H100_RESOURCE}
    ]
    cluster.client.put(type(vm).from_dict(raw))
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1


async def test_a_revision_named_in_the_vm_spec_wins_over_the_recorded_one(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2)
    pinned = instancetype_revision_object(
        "vm-pinned", NAMESPACE, instancetype="gpu-large", gpus=[H100_RESOURCE] * 3
    )
    cluster.client.put(ControllerRevision.from_dict(pinned))
    cluster.vm(
        "vm",
        0,
        running=True,
        instancetype={"name": "gpu-large", "revisionName": "vm-pinned"},
    )
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 3


async def test_a_revision_recorded_for_another_instancetype_is_not_read(cluster: Cluster) -> None:
    """The VM now names another instancetype, whose revision KubeVirt has yet to store:
    the old one's GPUs are not the order (revisionFinder checks its object-name label)."""
    cluster.node("node-a")
    cluster.instancetype_vm("vm", "gpu-large", 2)
    await cluster.settle()
    cluster.vm("vm", 0, running=True, instancetype={"name": "gpu-small"})
    cluster.clock.advance(hours=1)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2, "nothing known of gpu-small: the set is kept as is"
    cluster.instancetype_vm("vm", "gpu-small", 1)
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1


async def test_a_vm_whose_revision_is_not_seen_yet_is_bound_once_it_is(cluster: Cluster) -> None:
    cluster.node("node-a")
    rev = cluster.instancetype_vm("vm", "gpu-large", 2, recorded=False)
    await cluster.settle()
    assert cluster.set_of("vm") == []
    cluster.record_revision("vm", rev.metadata.name, "gpu-large")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2


async def test_an_edit_of_a_revision_reaches_the_order(cluster: Cluster) -> None:
    """A revision KubeVirt replaced (its upgrade handler re-creates old ones) is read anew."""
    cluster.node("node-a")
    rev = cluster.instancetype_vm("vm", "gpu-large", 2, running=False)
    await cluster.settle()
    raw = rev.to_dict()
    raw["data"]["spec"]["gpus"] = [{"name": "g", "deviceName": H100_RESOURCE}]
    cluster.client.put(ControllerRevision.from_dict(raw))
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 1
