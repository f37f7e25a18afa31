"""Simulated KubeVirt: VMIs from VMs through admission, their pods, the phases, the
LiveUpdate affinity sync, the WaitForFirstConsumer pod, stop and deletion."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gpu_binder.api.instancetype import ControllerRevision
from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.sim.builders import devices, vm_object, vmi_object
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.launcher import VIRTUALIZATION_DEVICES
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import cordon
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.vmistatus import FOREGROUND_FINALIZER, VMI_FINALIZER

from .kubevirt_world import H100, SLOT0, KubeVirtWorld


@pytest.fixture
def kv(store: MemoryClient, clock: VirtualClock) -> KubeVirtWorld:
    return KubeVirtWorld(store, clock)


def node_affinity(obj: dict[str, Any]) -> Any:
    return (obj.get("spec") or {}).get("affinity")


def pinned_to(pod: Pod) -> set[str]:
    affinity = node_affinity(pod.raw) or {}
    required = (affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return {
        v
        for t in required.get("nodeSelectorTerms") or []
        for f in t.get("matchFields") or []
        for v in f.get("values") or []
    }


async def running_vm(kv: KubeVirtWorld, *gpus: str, **kw: Any) -> VirtualMachine:
    return await kv.store.create(vm_object("vm1", "t", list(gpus), **kw))


async def vm_controller_starts(kv: KubeVirtWorld) -> None:
    """The VM controller's first two passes: the API version annotations, then the VMI."""
    await kv.kubevirt.vms.step()
    await kv.kubevirt.vms.step()


async def test_a_running_vm_gets_a_vmi_named_and_owned_by_it(kv: KubeVirtWorld) -> None:
    vm = await running_vm(kv, H100)
    await kv.settle()
    vmi = kv.vmi()
    owner = vmi.metadata.owner("VirtualMachine") if vmi is not None else None
    assert owner is not None and (owner.uid, owner.controller) == (vm.metadata.uid, True)
    assert vmi is not None and {VMI_FINALIZER, FOREGROUND_FINALIZER} <= set(vmi.metadata.finalizers)


async def test_the_vmi_copies_the_gpu_entries_of_the_template(kv: KubeVirtWorld) -> None:
    await running_vm(kv, H100, H100)
    await kv.settle()
    vmi = kv.vmi()
    assert vmi is not None and vmi.device_names == (H100, H100)


async def test_the_vmi_is_created_as_admission_patched_it(kv: KubeVirtWorld) -> None:
    kv.webhook.pin_to = "n2"
    await running_vm(kv, H100)
    await vm_controller_starts(kv)
    vmi = kv.vmi()
    assert vmi is not None and node_affinity(vmi.raw) is not None


async def test_a_denied_start_is_retried_with_the_workqueues_backoff(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    kv.webhook.deny = "4 x h100 requested; the largest free set is 2 on node-c"
    await running_vm(kv, H100)
    await kv.settle()
    denied = len(kv.kubevirt.denials)
    kv.webhook.deny = ""
    clock.advance(1)
    await kv.settle()
    assert denied >= 1 and kv.vmi() is not None


async def test_the_backoff_doubles_with_each_denial(kv: KubeVirtWorld, clock: VirtualClock) -> None:
    kv.webhook.deny = "no room"
    await running_vm(kv, H100)
    await kv.settle()
    times = []
    for _ in range(400):
        before = len(kv.kubevirt.denials)
        clock.advance(0.005)
        await kv.settle()
        if len(kv.kubevirt.denials) > before:
            times.append(clock.now())
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
    assert gaps == sorted(gaps) and gaps[-1] >= 8 * gaps[0]


async def test_a_vmi_gets_a_launcher_pod_rendered_from_it_through_pod_admission(
    kv: KubeVirtWorld,
) -> None:
    await kv.node("n1", {SLOT0: 1})
    await running_vm(kv, SLOT0)
    await kv.settle()
    [pod] = kv.pods()
    assert pod.resources == {SLOT0: 1, **dict.fromkeys(VIRTUALIZATION_DEVICES, 1)}
    # Admission sees the generateName only; the API server names the pod after it.
    [seen] = kv.pod_webhook.seen
    assert "name" not in seen["metadata"]
    assert pod.metadata.name.startswith(seen["metadata"]["generateName"])


async def test_a_denied_pod_leaves_its_vmi_pending(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    kv.pod_webhook.deny = "slot resources of another set"
    await running_vm(kv, SLOT0)
    await kv.settle()
    assert (kv.phase(), kv.pods()) == ("Pending", [])
    assert kv.kubevirt.vmis.pod_denials


async def test_the_vmi_gets_its_node_from_its_launcher_pod(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    await kv.node("n2")
    await running_vm(kv, SLOT0)
    await kv.settle()
    [pod] = kv.pods()
    vmi = kv.vmi()
    assert vmi is not None and (vmi.phase, vmi.node_name) == ("Running", pod.node_name)
    assert pod.node_name == "n1"


async def test_the_vmi_goes_scheduling_scheduled_then_running(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    phases: list[str] = []

    def follow(kind: type, e: Any) -> None:
        if kind is VirtualMachineInstance and (not phases or phases[-1] != e.object.phase):
            phases.append(e.object.phase)

    kv.store.subscribe(follow)
    await running_vm(kv, SLOT0)
    await kv.settle()
    assert phases == ["Pending", "Scheduling", "Scheduled", "Running"]


async def test_a_vmi_whose_pod_no_node_can_take_stays_scheduling(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    await cordon(kv.store, "n1")
    await running_vm(kv, SLOT0)
    await kv.settle()
    waiting = kv.phase()
    await cordon(kv.store, "n1", False)
    await kv.settle()
    assert (waiting, kv.phase()) == ("Scheduling", "Running")


async def test_the_vm_controller_removes_an_affinity_the_template_does_not_have(
    kv: KubeVirtWorld,
) -> None:
    kv.webhook.pin_to = "n1"
    await running_vm(kv, H100)
    await vm_controller_starts(kv)
    pinned = node_affinity(kv.vmi().raw)  # type: ignore[union-attr]
    await kv.kubevirt.vms.step()  # its sync on the new VMI, before anything ran it
    vmi = kv.vmi()
    assert pinned is not None and vmi is not None and vmi.phase == "Pending"
    assert node_affinity(vmi.raw) is None


async def test_the_vm_controller_replaces_the_vmi_affinity_with_the_templates(
    kv: KubeVirtWorld,
) -> None:
    kv.webhook.pin_to = "n1"
    vm = vm_object("vm1", "t", [H100])
    raw = wire(vm)
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    template_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [zone]}]
    }}}  # fmt: skip
    raw["spec"]["template"]["spec"]["affinity"] = template_affinity
    await kv.store.create(VirtualMachine.from_dict(raw))
    await vm_controller_starts(kv)
    await kv.kubevirt.vms.step()
    vmi = kv.vmi()
    assert vmi is not None and node_affinity(vmi.raw) == template_affinity


async def test_under_the_stage_rollout_strategy_the_webhooks_affinity_stays(
    store: MemoryClient, clock: VirtualClock
) -> None:
    kv = KubeVirtWorld(store, clock, live_update=False)
    kv.webhook.pin_to = "n1"
    await running_vm(kv, H100)
    await vm_controller_starts(kv)
    await kv.kubevirt.vms.step()
    vmi = kv.vmi()
    assert vmi is not None and node_affinity(vmi.raw) is not None


async def test_a_pod_rendered_before_the_affinity_sync_keeps_the_pin(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    kv.webhook.pin_to = "n1"
    await running_vm(kv, SLOT0)
    await vm_controller_starts(kv)  # the VMI, pinned by admission
    await kv.kubevirt.vmis.step()  # the API version annotations
    await kv.kubevirt.vmis.step()  # the pod, from the pinned VMI
    await kv.settle()
    [pod] = kv.pods()
    vmi = kv.vmi()
    assert pinned_to(pod) == {"n1"}
    assert vmi is not None and node_affinity(vmi.raw) is None


async def test_a_pod_rendered_after_the_affinity_sync_is_not_pinned(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    kv.webhook.pin_to = "n1"
    await running_vm(kv, SLOT0)
    await vm_controller_starts(kv)
    await kv.kubevirt.vmis.step()
    await kv.kubevirt.vms.step()  # the sync wins the race
    await kv.kubevirt.vmis.step()
    [pod] = kv.pods()
    assert pinned_to(pod) == set()


async def test_a_template_gpu_edit_while_running_requires_a_restart_and_changes_nothing(
    kv: KubeVirtWorld,
) -> None:
    await kv.node("n1", {SLOT0: 1, H100: 2})
    await running_vm(kv, SLOT0)
    await kv.settle()
    before = kv.vmi()

    def more_gpus(vm: VirtualMachine) -> VirtualMachine:
        raw = wire(vm)
        raw["spec"]["template"]["spec"]["domain"]["devices"] = devices([H100, H100])
        return VirtualMachine.from_dict(raw)

    await modify(kv.store, VirtualMachine, "vm1", "t", more_gpus)
    await kv.settle()
    vm, vmi = kv.vm(), kv.vmi()
    assert vm is not None and vmi is not None and before is not None
    conditions = {c["type"]: c["status"] for c in vm.raw["status"].get("conditions") or []}
    assert conditions.get("RestartRequired") == "True"
    assert (vmi.metadata.uid, vmi.device_names) == (before.metadata.uid, (SLOT0,))


async def test_the_next_start_runs_the_edited_template(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    await kv.node("n1", {SLOT0: 1, H100: 2})
    await running_vm(kv, SLOT0)
    await kv.settle()

    def edit(vm: VirtualMachine) -> VirtualMachine:
        raw = wire(vm)
        raw["spec"]["template"]["spec"]["domain"]["devices"] = devices([H100, H100])
        return VirtualMachine.from_dict(raw)

    await modify(kv.store, VirtualMachine, "vm1", "t", edit)
    await kv.kubelet.finish("t", "vm1")  # the guest powers off; Always starts it again
    await kv.settle()
    vmi = kv.vmi()
    assert vmi is not None and vmi.device_names == (H100, H100) and vmi.phase == "Running"


async def test_a_start_records_the_vm_spec_in_a_start_revision(kv: KubeVirtWorld) -> None:
    vm = await running_vm(kv, H100)
    await kv.settle()
    [rev] = kv.store.objects(ControllerRevision)
    assert rev.metadata.name == f"revision-start-vm-{vm.metadata.uid}-1"
    assert rev.data["spec"]["template"] == wire(vm)["spec"]["template"]


async def test_a_vmi_on_a_waiting_data_volume_gets_a_temporary_pod_first(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    await kv.node("n1", {SLOT0: 1})
    kv.storage.add_waiting("t", "vm1-disk")
    await running_vm(kv, SLOT0, data_volume="vm1-disk")
    await kv.settle()
    # The temporary pod ran, its node bound the claim, and it was deleted; the volume
    # populates, and the VMI waits for it.
    first = (dict(kv.kubevirt.vmis.pods_created), kv.phase(), len(kv.pods()))
    clock.advance(kv.storage.populate.total_seconds())
    await kv.settle()
    assert first == ({"temporary": 1}, "Pending", 0)
    assert kv.phase() == "Running" and len(kv.pods()) == 1
    assert kv.kubevirt.vmis.pods_created == {"temporary": 1, "launcher": 1}


async def test_the_launcher_pod_after_a_temporary_pod_is_rendered_without_the_pin(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    await kv.node("n1", {SLOT0: 1})
    kv.webhook.pin_to = "n1"
    kv.storage.add_waiting("t", "vm1-disk")
    await running_vm(kv, SLOT0, data_volume="vm1-disk")
    await kv.settle()
    clock.advance(kv.storage.populate.total_seconds())
    await kv.settle()
    [pod] = kv.pods()
    assert pinned_to(pod) == set()


async def test_stopping_deletes_the_vmi_which_ends_then_loses_its_finalizers(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    await kv.node("n1", {SLOT0: 1})
    await running_vm(kv, SLOT0)
    await kv.settle()
    seen: list[tuple[bool, str, int]] = []

    def follow(kind: type, e: Any) -> None:
        if kind is VirtualMachineInstance and e.type != "DELETED":
            o = e.object
            seen.append((o.being_deleted, o.phase, len(o.metadata.finalizers)))

    kv.store.subscribe(follow)
    clock.advance(60)
    assert await kv.kubevirt.set_running("t", "vm1", False) is None
    await kv.settle()
    assert seen[0] == (True, "Running", 2)
    assert (True, "Succeeded", 2) in seen and seen[-1] == (True, "Succeeded", 1)
    assert kv.vmi() is None and kv.pods() == []


async def test_a_deleted_vm_stops_its_vmi_and_goes_once_the_vmi_is_gone(
    kv: KubeVirtWorld,
) -> None:
    await kv.node("n1", {SLOT0: 1})
    await running_vm(kv, SLOT0)
    await kv.settle()
    await kv.store.delete(VirtualMachine, "vm1", "t")
    lingering = kv.vm()
    await kv.settle()
    assert lingering is not None and lingering.metadata.deletion_timestamp is not None
    assert (kv.vm(), kv.vmi()) == (None, None)


async def test_a_vm_created_again_under_its_name_gets_a_new_uid_and_vmi(
    kv: KubeVirtWorld,
) -> None:
    await kv.node("n1", {SLOT0: 1})
    old = await running_vm(kv, SLOT0)
    await kv.settle()
    old_vmi = kv.vmi()
    await kv.store.delete(VirtualMachine, "vm1", "t")
    await kv.settle()
    new = await running_vm(kv, SLOT0)
    await kv.settle()
    vmi = kv.vmi()
    assert new.metadata.uid != old.metadata.uid and old_vmi is not None and vmi is not None
    assert vmi.metadata.uid != old_vmi.metadata.uid and vmi.phase == "Running"
    owner = vmi.metadata.owner("VirtualMachine")
    assert owner is not None and owner.uid == new.metadata.uid


async def test_a_vmi_that_failed_before_it_ran_backs_the_vm_off(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    await cordon(kv.store, "n1")
    await running_vm(kv, SLOT0)
    await kv.settle()
    await kv.kubelet.finish("t", "vm1", "Failed", "PodFailed")  # it never ran
    await kv.settle()
    vm = kv.vm()
    assert vm is not None and vm.raw["status"]["printableStatus"] == "CrashLoopBackOff"
    assert vm.raw["status"]["startFailure"]["consecutiveFailCount"] == 1
    assert kv.vmi() is None


async def test_a_vmi_created_around_admission_gets_only_virt_apis_finalizer(
    kv: KubeVirtWorld,
) -> None:
    created = await kv.kubevirt.create_vmi(vmi_object("lone", "t", [H100]), admitted=False)
    assert isinstance(created, VirtualMachineInstance)
    assert created.vm_name is None and created.metadata.finalizers == (FOREGROUND_FINALIZER,)
    assert kv.webhook.seen == []


async def test_a_step_with_nothing_changed_writes_nothing(kv: KubeVirtWorld) -> None:
    await kv.node("n1", {SLOT0: 1})
    await running_vm(kv, SLOT0)
    await kv.settle()
    assert await kv.kubevirt.step() == 0
