"""Simulated KubeVirt: VMIs for running VMs through admission, scheduling, stop and restart."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine, VirtualMachineInstance
from gpu_binder.sim.builders import vm_object, vmi_object
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.kubelet import VMI_FINALIZER, Kubelet
from gpu_binder.sim.kubevirt import KubeVirtSim
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import cordon, create_node, set_allocatable, set_ready

H100 = "nvidia.com/H100"


class Webhook:
    """Admission that allows everything, or denies while `deny` holds a message."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.deny = ""
        self.pin_to = ""

    async def __call__(self, vmi: dict[str, Any]) -> dict[str, Any] | str:
        self.seen.append(vmi)
        if self.deny:
            return self.deny
        if self.pin_to:
            term = {
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.pin_to]}]
            }
            node_affinity = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
            vmi = {**vmi, "spec": {**vmi["spec"], "affinity": {"nodeAffinity": node_affinity}}}
        return vmi


@pytest.fixture
def webhook() -> Webhook:
    return Webhook()


@pytest.fixture
def kubevirt(store: MemoryClient, clock: VirtualClock, webhook: Webhook) -> KubeVirtSim:
    return KubeVirtSim(store, clock.now, webhook)


@pytest.fixture
def kubelet(store: MemoryClient, clock: VirtualClock) -> Kubelet:
    return Kubelet(store, clock.now)


async def settle(*parts: Any) -> None:
    while sum([await p.step() for p in parts]):
        pass


def vmi(store: MemoryClient, name: str = "vm1") -> VirtualMachineInstance | None:
    return store.peek(VirtualMachineInstance, name, "t")


async def test_a_running_vm_gets_a_vmi_named_and_owned_by_it(
    store: MemoryClient, kubevirt: KubeVirtSim
) -> None:
    vm = await store.create(vm_object("vm1", "t", [H100]))
    await kubevirt.step()
    v = vmi(store)
    owner = v.metadata.owner("VirtualMachine") if v is not None else None
    assert owner is not None and (owner.uid, owner.controller) == (vm.metadata.uid, True)


async def test_the_vmi_copies_the_gpu_entries_of_the_template(
    store: MemoryClient, kubevirt: KubeVirtSim
) -> None:
    await store.create(vm_object("vm1", "t", [H100, H100]))
    await kubevirt.step()
    v = vmi(store)
    assert v is not None and v.device_names == (H100, H100)


async def test_the_vmi_is_created_as_admission_patched_it(
    store: MemoryClient, kubevirt: KubeVirtSim, webhook: Webhook
) -> None:
    webhook.pin_to = "n2"
    await store.create(vm_object("vm1", "t", [H100]))
    await kubevirt.step()
    v = vmi(store)
    assert v is not None and "affinity" in v.raw["spec"]


async def test_a_denied_start_is_retried_after_the_backoff(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, webhook: Webhook
) -> None:
    webhook.deny = "4 x h100 requested; the largest free set is 2 on node-c"
    await store.create(vm_object("vm1", "t", [H100]))
    await kubevirt.step()
    webhook.deny = ""
    await kubevirt.step()
    before_backoff = vmi(store)
    clock.advance(kubevirt.restart_backoff)
    await kubevirt.step()
    assert before_backoff is None and vmi(store) is not None
    assert kubevirt.denials == [
        ("t/vm1", "4 x h100 requested; the largest free set is 2 on node-c")
    ]


async def test_a_stopped_vm_gets_no_vmi(store: MemoryClient, kubevirt: KubeVirtSim) -> None:
    await store.create(vm_object("vm1", "t", [H100], running=False))
    await kubevirt.step()
    assert vmi(store) is None


async def test_a_pending_vmi_is_scheduled_on_the_node_its_affinity_allows(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, webhook: Webhook
) -> None:
    for n in ("n1", "n2", "n3"):
        await create_node(store, n, clock.now())
    webhook.pin_to = "n2"
    await store.create(vm_object("vm1", "t", [H100]))
    await kubevirt.step()
    v = vmi(store)
    assert v is not None and (v.phase, v.node_name) == ("Scheduled", "n2")


async def test_a_cordoned_or_unready_node_is_not_chosen(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim
) -> None:
    for n in ("n1", "n2", "n3"):
        await create_node(store, n, clock.now())
    await cordon(store, "n1")
    await set_ready(store, "n2", False, clock.now())
    await store.create(vm_object("vm1", "t"))
    await kubevirt.step()
    v = vmi(store)
    assert v is not None and v.node_name == "n3"


async def test_vmis_spread_over_the_least_loaded_nodes(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim
) -> None:
    for n in ("n1", "n2"):
        await create_node(store, n, clock.now())
    for name in ("a", "b"):
        await store.create(vm_object(name, "t"))
    await kubevirt.step()
    nodes = {v.node_name for v in store.objects(VirtualMachineInstance)}
    assert nodes == {"n1", "n2"}


async def test_a_vmi_no_node_can_take_is_scheduled_once_one_can(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, webhook: Webhook
) -> None:
    await create_node(store, "n2", clock.now())
    await cordon(store, "n2")
    webhook.pin_to = "n2"
    await store.create(vm_object("vm1", "t", [H100]))
    await kubevirt.step()
    waiting = vmi(store)
    await cordon(store, "n2", False)
    await kubevirt.step()
    v = vmi(store)
    assert waiting is not None and waiting.phase == "Pending"
    assert v is not None and v.node_name == "n2"


async def test_a_pending_vmi_being_deleted_is_not_scheduled(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim
) -> None:
    await create_node(store, "n1", clock.now())
    await cordon(store, "n1")
    await store.create(vm_object("vm1", "t"))
    await kubevirt.step()
    await store.delete(VirtualMachineInstance, "vm1", "t")
    await cordon(store, "n1", False)
    await kubevirt.step()
    v = vmi(store)
    assert v is not None and v.metadata.deletion_timestamp is not None
    assert (v.phase, v.node_name) == ("Pending", "")


async def test_a_stopped_vms_vmi_runs_while_deleted_until_its_guest_has_shut_down(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t"))
    await settle(kubevirt, kubelet)
    seen: list[tuple[bool, str]] = []

    def follow(kind: type, e: Any) -> None:
        if kind is VirtualMachineInstance and e.type != "DELETED":
            seen.append((e.object.metadata.deletion_timestamp is not None, e.object.phase))

    store.subscribe(follow)
    await kubevirt.set_running("t", "vm1", False)
    await settle(kubevirt, kubelet)
    assert seen[:2] == [(True, "Running"), (True, "Succeeded")]
    assert vmi(store) is None


async def test_stopping_a_vm_ends_its_vmi_with_a_finish_time_then_deletes_it(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t"))
    await settle(kubevirt, kubelet)
    ended: list[Any] = []
    store.subscribe(lambda kind, e: ended.append(getattr(e.object, "finished_at", None)))
    clock.advance(60)
    await kubevirt.set_running("t", "vm1", False)
    await settle(kubevirt, kubelet)
    assert vmi(store) is None and clock.now() in ended


async def test_a_failed_vmi_of_a_running_vm_is_replaced_after_the_backoff(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t", ["gpu.cozystack.io/10de-2330-s9"]))
    await settle(kubevirt, kubelet)
    await settle(kubevirt, kubelet)
    before_backoff = kubevirt.created
    clock.advance(kubevirt.restart_backoff)
    await settle(kubevirt, kubelet)
    assert (before_backoff, kubevirt.created, len(kubelet.failed_starts)) == (1, 2, 2)


async def test_the_backoff_doubles_with_each_failure(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t", ["gpu.cozystack.io/10de-2330-s9"]))
    await settle(kubevirt, kubelet)
    clock.advance(kubevirt.restart_backoff)
    await settle(kubevirt, kubelet)
    clock.advance(kubevirt.restart_backoff)
    await settle(kubevirt, kubelet)
    early = kubevirt.created
    clock.advance(kubevirt.restart_backoff)
    await settle(kubevirt, kubelet)
    assert (early, kubevirt.created) == (2, 3)


async def test_a_restarted_vm_gets_a_new_vmi(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await set_allocatable(store, "n1", {H100: 1})
    await store.create(vm_object("vm1", "t", [H100]))
    await settle(kubevirt, kubelet)
    first = vmi(store)
    await kubelet.finish("t", "vm1")
    await settle(kubevirt, kubelet)
    second = vmi(store)
    assert first is not None and second is not None
    assert second.metadata.uid != first.metadata.uid and second.phase == "Running"


async def test_deleting_a_vm_ends_its_vmi_with_a_finish_time(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t"))
    await settle(kubevirt, kubelet)
    finished: list[Any] = []
    store.subscribe(lambda kind, e: finished.append(getattr(e.object, "finished_at", None)))
    await store.delete(VirtualMachine, "vm1", "t")
    await settle(kubevirt, kubelet)
    assert vmi(store) is None and clock.now() in finished


async def test_a_vmi_without_a_vm_can_be_created_around_admission(
    store: MemoryClient, kubevirt: KubeVirtSim, webhook: Webhook
) -> None:
    created = await kubevirt.create_vmi(vmi_object("lone", "t", [H100]), admitted=False)
    assert isinstance(created, VirtualMachineInstance)
    assert created.vm_name is None and VMI_FINALIZER in created.metadata.finalizers
    assert webhook.seen == []


async def test_a_step_with_nothing_changed_writes_nothing(
    store: MemoryClient, clock: VirtualClock, kubevirt: KubeVirtSim, kubelet: Kubelet
) -> None:
    await create_node(store, "n1", clock.now())
    await store.create(vm_object("vm1", "t"))
    await settle(kubevirt, kubelet)
    assert await kubevirt.step() == 0
