"""Instancetypes: the VM controller records a revision of the one a VM names, and every VMI
of the VM gets the GPUs of that revision."""

from __future__ import annotations

import pytest

from gpu_binder.api.instancetype import ControllerRevision, VirtualMachineClusterInstancetype
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.sim.builders import cluster_instancetype, vm_object
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire

from .kubevirt_world import H100, KubeVirtWorld


@pytest.fixture
async def kv(store: MemoryClient, clock: VirtualClock) -> KubeVirtWorld:
    world = KubeVirtWorld(store, clock)
    await world.node("n1", {H100: 8})
    return world


async def instancetype(kv: KubeVirtWorld, gpus: int, name: str = "gpu") -> None:
    raw = cluster_instancetype(name, [H100] * gpus)
    found = kv.store.peek(VirtualMachineClusterInstancetype, name)
    if found is None:
        await kv.store.create(VirtualMachineClusterInstancetype.from_dict(raw))
        return

    def edit(it: VirtualMachineClusterInstancetype) -> VirtualMachineClusterInstancetype:
        new = wire(it)
        new["spec"] = raw["spec"]
        return VirtualMachineClusterInstancetype.from_dict(new)

    await modify(kv.store, VirtualMachineClusterInstancetype, name, "", edit)


async def vm(kv: KubeVirtWorld, name: str = "vm1", gpus: tuple[str, ...] = ()) -> None:
    await kv.store.create(vm_object(name, "t", list(gpus), instancetype="gpu"))
    await kv.settle()


def revisions(kv: KubeVirtWorld) -> list[ControllerRevision]:
    return [r for r in kv.store.objects(ControllerRevision) if r.is_instancetype]


async def test_a_vm_naming_an_instancetype_records_a_revision_of_it(kv: KubeVirtWorld) -> None:
    await instancetype(kv, 2)
    await vm(kv)
    [rev] = revisions(kv)
    it = kv.store.peek(VirtualMachineClusterInstancetype, "gpu")
    vm1 = kv.vm()
    assert it is not None and vm1 is not None
    assert rev.metadata.name == f"vm1-gpu-v1beta1-{it.metadata.uid}-1"
    assert rev.gpus + rev.host_devices == (H100, H100)
    ref = vm1.raw["status"]["instancetypeRef"]
    assert ref["controllerRevisionRef"]["name"] == rev.metadata.name
    owner = rev.metadata.owner("VirtualMachine")
    assert owner is not None and owner.uid == vm1.metadata.uid


async def test_the_vmi_gets_the_instancetypes_gpus(kv: KubeVirtWorld) -> None:
    await instancetype(kv, 2)
    await vm(kv)
    vmi = kv.vmi()
    assert vmi is not None and vmi.device_names == (H100, H100) and vmi.phase == "Running"


async def test_an_edited_instancetype_does_not_change_a_vm_that_recorded_it(
    kv: KubeVirtWorld,
) -> None:
    await instancetype(kv, 2)
    await vm(kv)
    await instancetype(kv, 4)
    await kv.kubelet.finish("t", "vm1")  # the guest powers off; Always starts a new VMI
    await kv.settle()
    vmi = kv.vmi()
    assert vmi is not None and vmi.device_names == (H100, H100)


async def test_a_vm_created_after_the_edit_gets_the_new_gpus(kv: KubeVirtWorld) -> None:
    await instancetype(kv, 2)
    await vm(kv)
    await instancetype(kv, 4)
    await vm(kv, "vm2")
    vmi = kv.vmi("vm2")
    assert vmi is not None and len(vmi.device_names) == 4


async def test_a_template_naming_gpus_beside_the_instancetypes_makes_no_vmi(
    kv: KubeVirtWorld,
) -> None:
    await instancetype(kv, 2)
    await vm(kv, gpus=(H100,))
    assert kv.vmi() is None
    assert any("conflicts with instancetype" in m for _, m in kv.kubevirt.vms.start_errors)


async def test_a_vm_naming_a_missing_instancetype_makes_no_vmi(kv: KubeVirtWorld) -> None:
    await vm(kv)
    assert kv.vmi() is None and revisions(kv) == []
    assert any("not found" in m for _, m in kv.kubevirt.vms.start_errors)


async def test_the_start_revision_names_the_instancetype_revision(kv: KubeVirtWorld) -> None:
    await instancetype(kv, 1)
    await vm(kv)
    [rev] = revisions(kv)
    [start] = [r for r in kv.store.objects(ControllerRevision) if not r.is_instancetype]
    assert start.data["spec"]["instancetype"]["revisionName"] == rev.metadata.name


async def test_the_revisions_go_with_their_vm(kv: KubeVirtWorld) -> None:
    await instancetype(kv, 1)
    await vm(kv)
    await kv.store.delete(VirtualMachine, "vm1", "t")
    await kv.settle()
    assert kv.store.objects(ControllerRevision) == []
