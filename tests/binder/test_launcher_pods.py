"""A VMI's phase is its tenant's to write; its launcher pod's is the kubelet's. A VMI that
reads Succeeded or Failed while a pod carrying its devices runs on a Ready node is still
in use: its GPUs stay attached and its record open (issue 11)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.types import Phase
from gpu_binder.sim.launcher import render_launcher_pod

from .cluster import NAMESPACE, Cluster


async def running(cluster: Cluster) -> list[str]:
    """vm runs on node-a with its 2 GPUs attached and its launcher pod Running there."""
    await bound(cluster)
    cluster.start("vm")
    launcher_pod(cluster)
    await cluster.settle()
    devices = cluster.set_of("vm")
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)
    return devices


def launcher_pod(
    cluster: Cluster,
    phase: str = "Running",
    resources: dict[str, Any] | None = None,
    scheduled: datetime | None = None,
) -> Pod:
    """The VMI's virt-launcher pod as the kubelet reports it, on the VMI's node; bound to
    it at `scheduled` (the PodScheduled condition the API server stamps)."""
    vmi = cluster.vmi("vm")
    raw = render_launcher_pod(vmi.to_dict())
    raw["metadata"]["name"] = "virt-launcher-vm-abcde"
    raw["spec"]["nodeName"] = vmi.node_name
    if resources is not None:
        raw["spec"]["containers"][0]["resources"] = {"limits": resources}
    raw["status"] = {"phase": phase}
    if scheduled is not None:
        condition = {"type": "PodScheduled", "status": "True"}
        raw["status"]["conditions"] = [{**condition, "lastTransitionTime": scheduled.isoformat()}]
    return cluster.client.put(Pod.from_dict(raw))


def tenant_reports(cluster: Cluster, phase: str) -> None:
    """The tenant writes its VMI's status (VMIs have no status subresource)."""
    raw = cluster.vmi("vm").to_dict()
    stamp = {"phase": phase, "phaseTransitionTimestamp": cluster.clock.now.isoformat()}
    raw["status"] = {**raw["status"], "phase": phase, "phaseTransitionTimestamps": [stamp]}
    cluster.client.put(VirtualMachineInstance.from_dict(raw))


async def bound(cluster: Cluster) -> None:
    """vm's 2 GPUs bound on node-a, its VMI not started yet."""
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()


def record_starts(cluster: Cluster) -> set[datetime]:
    return {r.spec.start for r in cluster.records()}


def open_records(cluster: Cluster) -> int:
    return sum(1 for r in cluster.records() if r.spec.end is None)


async def test_a_vmi_reported_succeeded_while_its_launcher_pod_runs_keeps_its_gpus(
    cluster: Cluster,
) -> None:
    devices = await running(cluster)
    tenant_reports(cluster, "Succeeded")
    cluster.set_running("vm", False)
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == devices
    assert all(cluster.phase(n) == Phase.ATTACHED for n in devices)


async def test_a_faked_end_leaves_the_vmis_records_open_throughout(cluster: Cluster) -> None:
    await running(cluster)
    records = {r.metadata.name for r in cluster.records()}
    tenant_reports(cluster, "Succeeded")
    await cluster.settle_after(minutes=1)
    tenant_reports(cluster, "Running")
    await cluster.settle_after(minutes=1)
    assert {r.metadata.name for r in cluster.records()} == records
    assert open_records(cluster) == 2


async def test_a_vmi_ends_once_its_launcher_pod_ended_too(cluster: Cluster) -> None:
    devices = await running(cluster)
    cluster.set_running("vm", False)
    tenant_reports(cluster, "Succeeded")
    await cluster.settle_after(seconds=5)
    pod_end = cluster.clock.advance(seconds=5)
    launcher_pod(cluster, phase="Succeeded")
    await cluster.settle_after(minutes=10)
    assert not any(cluster.phase(n) == Phase.ATTACHED for n in devices)
    ends = {r.spec.end for r in cluster.records()}
    assert None not in ends
    # The pod was seen running until its end arrived: the record runs at least that long.
    assert all(end is not None and end >= pod_end.replace(microsecond=0) for end in ends)


async def test_a_launcher_pod_on_a_node_that_is_not_ready_holds_nothing(
    cluster: Cluster,
) -> None:
    devices = await running(cluster)
    cluster.set_ready("node-a", False)
    cluster.set_running("vm", False)
    tenant_reports(cluster, "Failed")
    await cluster.settle_after(minutes=1)
    assert not any(cluster.phase(n) == Phase.ATTACHED for n in devices)
    assert open_records(cluster) == 0


async def test_a_pod_carrying_none_of_the_vmis_devices_holds_nothing(cluster: Cluster) -> None:
    devices = await running(cluster)
    launcher_pod(cluster, resources={"cpu": "1"})
    cluster.set_running("vm", False)
    tenant_reports(cluster, "Succeeded")
    await cluster.settle_after(minutes=1)
    assert not any(cluster.phase(n) == Phase.ATTACHED for n in devices)
    assert open_records(cluster) == 0


async def test_the_vmi_is_held_by_the_pods_of_its_own_uid_only(cluster: Cluster) -> None:
    devices = await running(cluster)
    raw = launcher_pod(cluster).to_dict()
    raw["metadata"]["ownerReferences"][0]["uid"] = "another-vmi"
    raw["metadata"]["labels"]["kubevirt.io/created-by"] = "another-vmi"
    cluster.client.put(Pod.from_dict(raw))
    cluster.set_running("vm", False)
    tenant_reports(cluster, "Succeeded")
    await cluster.settle_after(minutes=1)
    assert not any(cluster.phase(n) == Phase.ATTACHED for n in devices)
    assert cluster.client.peek(VirtualMachineInstance, "vm", NAMESPACE) is not None


async def test_a_start_its_tenant_stamped_later_is_billed_from_its_pods_binding(
    cluster: Cluster,
) -> None:
    """No binder saw the VMI unstarted (it was down): the Scheduled time in the VMI's
    status, which its tenant may have moved, is no later than its pod's binding."""
    await bound(cluster)
    cluster.start("vm", scheduled=cluster.clock.now + timedelta(minutes=31))
    pod_bound = cluster.clock.advance(minutes=1)
    launcher_pod(cluster, scheduled=pod_bound)
    cluster.clock.advance(minutes=30)
    await cluster.settle()
    assert record_starts(cluster) == {pod_bound.replace(microsecond=0)}


async def test_a_start_stamped_by_a_clock_minutes_behind_is_billed_from_its_pods_binding(
    cluster: Cluster,
) -> None:
    """virt-controller's clock is ten minutes behind, and no binder saw the start: the
    pod's binding, stamped by the API server, says when the VMI began to hold its GPUs."""
    await bound(cluster)
    cluster.clock.advance(minutes=30)
    pod_bound = cluster.clock.now
    cluster.start("vm", scheduled=pod_bound - timedelta(minutes=10))
    launcher_pod(cluster, scheduled=pod_bound)
    cluster.clock.advance(minutes=5)
    await cluster.settle()
    assert record_starts(cluster) == {pod_bound.replace(microsecond=0)}


async def test_without_a_pod_a_start_stamped_before_the_vmi_existed_is_billed_from_its_creation(
    cluster: Cluster,
) -> None:
    await bound(cluster)
    cluster.clock.advance(minutes=30)
    created = cluster.clock.now
    cluster.start("vm", scheduled=created - timedelta(minutes=10))
    cluster.clock.advance(minutes=5)
    await cluster.settle()
    assert record_starts(cluster) == {created.replace(microsecond=0)}


async def test_a_vmi_held_by_its_pod_on_one_node_takes_nothing_of_its_set_on_another(
    cluster: Cluster,
) -> None:
    """Its node failed, so its VMI failed and its set moved on; the node comes back with
    the old launcher pod still running there. That pod holds that node's devices, not the
    set's new ones: the VMI attaches none of them, nor opens a record for them."""
    await running(cluster)
    cluster.node("node-b")
    cluster.set_ready("node-a", False)
    cluster.set_running("vm", False)
    tenant_reports(cluster, "Failed")
    await cluster.settle_after(minutes=30)
    moved = cluster.set_of("vm")
    assert moved and cluster.node_of("vm") == "node-b", "the set did not move"
    cluster.set_ready("node-a", True)
    await cluster.settle_after(minutes=1)
    assert not any(cluster.phase(n) == Phase.ATTACHED for n in moved)
    assert open_records(cluster) == 0


async def test_a_start_the_watch_showed_late_is_billed_from_its_pods_binding(
    cluster: Cluster,
) -> None:
    """The VMI's Scheduled version reaches this binder seconds after its pod ran (a
    loaded API server's watch): its GPUs were the VMI's from the pod's binding, which the
    server stamped, not from when the binder saw the start (was: billed Attached from the
    sighting, Reserved that much long; the sim's invariant 12 with KubeVirt racing it)."""
    await bound(cluster)
    first = cluster.start("vm", phase="Scheduling")
    raw = first.to_dict()
    raw["status"] = {"phase": "Scheduling"}
    cluster.client.put(VirtualMachineInstance.from_dict(raw))
    await cluster.settle()
    pod_bound = cluster.clock.advance(seconds=2)
    launcher_pod(cluster, scheduled=pod_bound)
    cluster.clock.advance(seconds=5)
    cluster.start("vm", scheduled=pod_bound + timedelta(seconds=1))
    await cluster.settle()
    assert record_starts(cluster) == {pod_bound.replace(microsecond=0)}
