"""runStrategy as KubeVirt runs it: a VM KubeVirt will not run again is stopped, and the
reservation of its GPUs (releaseAfterStopped) runs from the moment it stopped."""

from __future__ import annotations

from gpu_binder.api.types import BindReason, Phase

from .cluster import Cluster


async def ran(cluster: Cluster, strategy: str, phase: str = "Succeeded") -> list[str]:
    """A VM of `strategy` ran on node-a and its VMI ended in `phase` now; KubeVirt's
    status says it synced the strategy. Its class releases a stopped VM's GPUs after 10m."""
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy=strategy)
    cluster.vm_status("vm", runStrategy=strategy, created=True)
    await cluster.settle()
    devices = cluster.set_of("vm")
    assert len(devices) == 2
    cluster.start("vm")
    await cluster.settle_after(hours=1)
    cluster.finish("vm", phase)
    await cluster.settle()
    return devices


async def test_a_rerun_on_failure_vm_whose_vmi_succeeded_is_stopped(cluster: Cluster) -> None:
    """KubeVirt deletes the Succeeded VMI and starts no other."""
    await ran(cluster, "RerunOnFailure")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


async def test_a_rerun_on_failure_vm_whose_vmi_failed_keeps_its_gpus(cluster: Cluster) -> None:
    """KubeVirt deletes the Failed VMI and asks for a start (status.stateChangeRequests)."""
    devices = await ran(cluster, "RerunOnFailure", phase="Failed")
    await cluster.remove_vmi("vm")
    cluster.vm_status("vm", stateChangeRequests=[{"action": "Start"}])
    await cluster.settle_after(minutes=30)
    assert cluster.set_of("vm") == devices


async def test_a_once_vm_whose_vmi_ended_is_stopped(cluster: Cluster) -> None:
    """KubeVirt keeps the ended VMI of a Once VM and starts no other."""
    await ran(cluster, "Once", phase="Failed")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


async def test_a_once_vm_not_yet_started_keeps_its_gpus(cluster: Cluster) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy="Once")
    await cluster.settle_after(minutes=30)
    assert len(cluster.set_of("vm")) == 2


async def test_an_always_vm_whose_vmi_ended_keeps_its_gpus(cluster: Cluster) -> None:
    """KubeVirt replaces an ended VMI of an Always VM."""
    devices = await ran(cluster, "Always")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(minutes=30)
    assert cluster.set_of("vm") == devices


async def test_a_manual_vm_whose_vmi_ended_is_stopped(cluster: Cluster) -> None:
    """A Manual VM's ended VMI is kept until someone starts it again."""
    await ran(cluster, "Manual")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


async def test_a_manual_vm_asked_to_start_keeps_its_gpus(cluster: Cluster) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy="Manual")
    cluster.vm_status("vm", stateChangeRequests=[{"action": "Start"}])
    await cluster.settle_after(minutes=30)
    assert len(cluster.set_of("vm")) == 2


async def test_a_manual_vm_with_no_vmi_and_no_start_request_is_stopped(cluster: Cluster) -> None:
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy="Manual")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


async def test_a_halted_vm_is_stopped(cluster: Cluster) -> None:
    await ran(cluster, "Halted")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


async def test_a_wait_as_receiver_vm_keeps_its_gpus(cluster: Cluster) -> None:
    """KubeVirt creates its receiver VMI at once, and it needs the GPUs to start."""
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    cluster.vm("vm", 2, run_strategy="WaitAsReceiver")
    await cluster.settle_after(minutes=30)
    assert len(cluster.set_of("vm")) == 2


async def test_a_vm_setting_both_running_and_run_strategy_is_stopped(cluster: Cluster) -> None:
    """KubeVirt refuses to run it (VirtualMachine.RunStrategy errs)."""
    cluster.gpu_class(release_after="10m")
    cluster.node("node-a")
    vm = cluster.vm("vm", 2, run_strategy="Always").to_dict()
    vm["spec"]["running"] = True
    from gpu_binder.api.kubevirt import VirtualMachine

    cluster.client.put(VirtualMachine.from_dict(vm))
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []


# --- the reservation runs from the stop --------------------------------------------------


async def test_a_move_of_a_stopped_set_does_not_restart_its_reservation(
    cluster: Cluster,
) -> None:
    """Cordoned at +8 min of a 10-minute reservation, the set moves and is released at +10
    min, not at +18."""
    await ran(cluster, "Halted")
    await cluster.remove_vmi("vm")
    cluster.node("node-b")
    await cluster.settle_after(minutes=8)
    cluster.cordon("node-a")
    await cluster.settle()
    moved = cluster.set_of("vm")
    assert cluster.node_of("vm") == "node-b"
    assert {cluster.device(n).status.binding.reason for n in moved} == {BindReason.MOVE}  # type: ignore[union-attr]
    await cluster.settle_after(minutes=2)
    assert cluster.set_of("vm") == []
    assert all(cluster.phase(n) == Phase.CLEANING for n in moved)


async def test_a_rebind_of_a_stopped_set_does_not_restart_its_reservation(
    cluster: Cluster,
) -> None:
    devices = await ran(cluster, "Halted")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(minutes=4)
    cluster.set_health(devices[0], False, "fell off the bus")
    await cluster.settle()
    await cluster.settle_after(minutes=5)  # Lost after lostGrace: replaced on node-a
    assert len(cluster.set_of("vm")) == 2 and devices[0] not in cluster.set_of("vm")
    await cluster.settle_after(minutes=1, seconds=30)
    assert cluster.set_of("vm") == []


async def test_a_restarted_vm_counts_its_next_stop_anew(cluster: Cluster) -> None:
    devices = await ran(cluster, "Halted")
    await cluster.remove_vmi("vm")
    cluster.node("node-b")
    await cluster.settle_after(minutes=8)
    cluster.cordon("node-a")
    await cluster.settle()
    cluster.vm("vm", 2, run_strategy="Always")
    cluster.start("vm")
    await cluster.settle_after(hours=1)
    cluster.vm("vm", 2, run_strategy="Halted")
    cluster.finish("vm")
    await cluster.remove_vmi("vm")
    await cluster.settle_after(minutes=9)
    assert len(cluster.set_of("vm")) == 2
    assert devices
