"""Identity by uid: sets, bind requests, usage records and standalone VMIs belong to an
object's uid, not its name."""

from __future__ import annotations

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import Phase

from .cluster import NAMESPACE, Cluster


async def recreated_while_no_binder_watched(cluster: Cluster) -> tuple[list[str], str]:
    """vm held node-a's two GPUs; while no binder ran, it was deleted and created again
    under its name (a new uid), running. Returns the old set and the new uid."""
    cluster.node("node-a", 2)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    old = cluster.set_of("vm")
    assert len(old) == 2
    await cluster.delete_vm("vm")  # no binder runs a pass until the restart
    new = cluster.vm("vm", 2, running=True)
    cluster.restart()
    await cluster.settle()
    return old, new.metadata.uid


async def test_a_vm_recreated_under_its_name_does_not_inherit_the_old_set(
    cluster: Cluster,
) -> None:
    old, _ = await recreated_while_no_binder_watched(cluster)
    assert all(cluster.phase(n) == Phase.CLEANING for n in old)
    assert cluster.set_of("vm") == [], "nothing uncleaned for the new VM"


async def test_a_recreated_vm_is_bound_under_its_new_uid_once_the_old_set_is_cleaned(
    cluster: Cluster,
) -> None:
    old, uid = await recreated_while_no_binder_watched(cluster)
    for n in old:
        cluster.reset(n)
    await cluster.settle()
    assert cluster.set_of("vm") == old
    for n in old:
        binding = cluster.device(n).status.binding
        assert binding is not None and binding.vm.uid == uid


async def test_an_earlier_vms_set_in_use_stays_until_its_vmi_ends(cluster: Cluster) -> None:
    """The old VM's VMI still shuts down: what it uses is never released under it."""
    cluster.node("node-a", 2)
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    old = cluster.set_of("vm")
    cluster.start("vm")
    await cluster.settle()
    await cluster.delete_vm("vm")
    cluster.vm("vm", 2, running=True)
    cluster.restart()
    await cluster.settle()
    assert all(cluster.phase(n) == Phase.ATTACHED for n in old)
    cluster.finish("vm")
    await cluster.remove_vmi("vm")
    await cluster.settle()
    assert all(cluster.phase(n) == Phase.CLEANING for n in old)


async def test_a_standalone_vmi_named_like_a_stopped_vm_never_takes_its_set(
    cluster: Cluster,
) -> None:
    cluster.node("node-a")
    cluster.vm("twin", 2)
    await cluster.settle()
    held = cluster.set_of("twin")
    cluster.start("twin", node="node-a", devices=(), owned=False, gpus=2)
    await cluster.settle()
    await cluster.settle_after(seconds=31)
    assert cluster.set_of("twin") == held
    assert all(cluster.phase(n) == Phase.BOUND for n in held)
    assert all(cluster.device(n).status.attachment is None for n in held)
    assert cluster.records() == []


async def test_a_standalone_vmis_set_takes_its_uid_once_it_runs(cluster: Cluster) -> None:
    """Its set is bound before the API server gave the VMI a uid; once the VMI is seen,
    the set is that uid's, and a later VMI of its name is another order."""
    cluster.node("node-a")
    await cluster.settle()
    cluster.request("solo", 2)
    await cluster.answer_requests()
    answer = cluster.answer("solo-bind").status
    vmi = cluster.start("solo", node="node-a", devices=answer.devices, owned=False)
    await cluster.settle()
    for n in answer.devices:
        binding = cluster.device(n).status.binding
        assert binding is not None and binding.vm.uid == vmi.metadata.uid


async def test_a_vm_recreated_under_its_name_gets_records_of_its_own(cluster: Cluster) -> None:
    cluster.node("node-a")
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    first = cluster.start("vm")
    await cluster.settle_after(minutes=5)
    await cluster.stop("vm")
    await cluster.settle()
    await cluster.delete_vm("vm")
    await cluster.settle()
    cluster.vm("vm", 1, running=True)
    await cluster.settle()
    second = cluster.start("vm")
    await cluster.settle()
    records = cluster.records()
    assert {r.spec.vmi.uid for r in records} == {first.metadata.uid, second.metadata.uid}
    assert len({r.metadata.name for r in records}) == 2
    assert isinstance(cluster.client.peek(VirtualMachine, "vm", NAMESPACE), VirtualMachine)
