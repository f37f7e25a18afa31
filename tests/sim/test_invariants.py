"""The invariant checker finds each violation of DESIGN §2, and none in a lawful history."""

from __future__ import annotations

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    USAGE_FINALIZER,
    GPUDevice,
    GPUUsageRecord,
    Phase,
)
from gpu_binder.sim.catalog import H100, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.invariants import InvariantChecker, quiet_pass
from gpu_binder.sim.kubelet import VMI_FINALIZER, with_phase
from gpu_binder.sim.memory import MemoryClient

from .histories import History


@pytest.fixture
def history(store: MemoryClient, clock: VirtualClock) -> History:
    store.put(gpu_class("h100", H100, "nvidia.com/H100"))
    return History(store, clock)


@pytest.fixture
def checker(store: MemoryClient, history: History) -> InvariantChecker:
    return InvariantChecker(store)


def numbers(violations: list[str]) -> list[str]:
    return sorted({v[: v.index(")") + 1] for v in violations})


async def test_a_lawful_history_has_no_violations(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    assert checker.check() == []
    ended = history.end(vmi)
    history.detach("d1", ended)
    history.release("d1")
    history.reset("d1")
    history.bind("d1", "t/b")
    assert checker.check() == []


def test_an_attachment_to_another_vms_vmi_violates_1(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.attach("d1", history.run("t/b", "n1"))
    assert numbers(checker.check()) == ["(1)"]


def test_a_set_over_two_nodes_violates_2(history: History, checker: InvariantChecker) -> None:
    history.device("d1", "n1")
    history.device("d2", "n2")
    history.bind("d1", "t/a")
    history.bind("d2", "t/a")
    assert numbers(checker.check()) == ["(2)"]


def test_a_device_a_running_vmi_uses_may_sit_beside_its_rebound_set(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1", "n1")
    history.device("d2", "n2")
    history.bind("d1", "t/a")
    history.attach("d1", history.run("t/a", "n1", "d1"))
    history.bind("d2", "t/a")
    assert checker.check() == []


def test_rebinding_a_device_a_running_vmi_uses_violates_3(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.run("t/a", "n1", "d1")
    history.release("d1")
    assert "(3)" in numbers(checker.check())


def test_cleaning_a_device_a_running_vmi_uses_violates_3(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.run("t/a", "n1", "d1")
    history.status("d1", phase=Phase.CLEANING)
    assert numbers(checker.check()) == ["(3)"]


async def test_a_device_leaving_the_store_while_a_vmi_runs_on_it_violates_3(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.run("t/a", "n1", "d1")
    await store.delete(GPUDevice, "d1")
    assert numbers(checker.check()) == ["(3)"]


async def shutting_down(store: MemoryClient, vmi: VirtualMachineInstance) -> None:
    """KubeVirt deletes the VMI: its finalizer keeps it Running while the guest shuts down."""
    raw = vmi.to_dict()
    raw["metadata"]["finalizers"] = [VMI_FINALIZER]
    store.put(VirtualMachineInstance.from_dict(raw))
    await store.delete(VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace)


async def test_cleaning_a_device_a_vmi_shutting_down_uses_violates_3(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    await shutting_down(store, vmi)
    history.release("d1")
    assert "(3)" in numbers(checker.check())


async def test_a_device_may_go_once_its_deleted_vmi_has_finished(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    await shutting_down(store, vmi)
    ended = history.end(vmi)
    history.detach("d1", ended)
    history.release("d1")
    assert checker.check() == []


def test_a_vmi_found_by_its_slot_resource_holds_the_device_too(
    history: History, checker: InvariantChecker, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1", slot=3)
    history.bind("d1", "t/a")
    raw = {
        "metadata": {"name": "a", "namespace": "t", "uid": "u1"},
        "spec": {
            "domain": {
                "devices": {"gpus": [{"name": "g", "deviceName": "gpu.cozystack.io/10de-2330-s3"}]}
            }
        },
    }
    store.put(with_phase(VirtualMachineInstance.from_dict(raw), "Running", clock.now(), node="n1"))
    history.release("d1")
    assert "(3)" in numbers(checker.check())


def test_a_device_going_to_a_new_vm_without_a_reset_violates_4(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.release("d1")
    history.bind("d1", "t/b")
    assert numbers(checker.check()) == ["(4)"]


def test_a_device_bound_straight_from_one_vm_to_another_violates_4(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.bind("d1", "t/b")
    assert numbers(checker.check()) == ["(4)"]


def test_a_device_may_return_to_its_own_vm_without_a_reset(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.release("d1")
    history.bind("d1", "t/a")
    assert checker.check() == []


def test_a_class_without_cleaning_passes_devices_on_at_once(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    store.put(gpu_class("h100", H100, "nvidia.com/H100", cleaning="None"))
    history.device("d1")
    history.bind("d1", "t/a")
    history.release("d1", Phase.AVAILABLE)
    history.bind("d1", "t/b")
    assert checker.check() == []


def test_an_attachment_without_a_usage_record_violates_6(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.attach("d1", history.run("t/a", "n1", "d1"), record=False)
    assert numbers(checker.check()) == ["(6)"]


def test_usage_records_are_not_judged_while_the_binder_is_down(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi, record=False)
    down = checker.check(records=False)
    history.record(vmi, "d1")
    assert down == [] and checker.check() == []


def test_a_record_closed_at_another_time_than_the_vmis_finish_violates_6(
    history: History, checker: InvariantChecker, clock: VirtualClock
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    ended = history.end(vmi)
    clock.advance(60)
    history.detach("d1", ended, end=clock.now())
    assert numbers(checker.check()) == ["(6)"]


async def held_for_records(store: MemoryClient, history: History) -> VirtualMachineInstance:
    """A VMI admitted with the usage finalizer, attached with its record open, then ended
    and deleted: the finalizer keeps it."""
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    raw = vmi.to_dict()
    raw["metadata"]["finalizers"] = [USAGE_FINALIZER]
    vmi = store.put(VirtualMachineInstance.from_dict(raw))
    history.attach("d1", vmi)
    ended = history.end(vmi)
    await store.delete(VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace)
    return ended


async def let_go(store: MemoryClient, vmi: VirtualMachineInstance) -> None:
    """The binder removes the usage finalizer: the deleted VMI goes."""
    current = store.peek(VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace)
    assert current is not None
    raw = current.to_dict()
    raw["metadata"]["finalizers"] = []
    await store.update(VirtualMachineInstance.from_dict(raw))


async def test_a_vmi_held_for_its_records_going_while_one_is_open_violates_6(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    vmi = await held_for_records(store, history)
    await let_go(store, vmi)
    assert numbers(checker.check()) == ["(6)"]


async def test_a_vmi_held_for_its_records_may_go_once_they_are_closed(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    vmi = await held_for_records(store, history)
    history.detach("d1", vmi)
    await let_go(store, vmi)
    assert store.peek(VirtualMachineInstance, "a", "t") is None
    assert checker.check() == []


def test_a_changed_closed_record_violates_6(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    history.detach("d1", history.end(vmi))
    checker.check()
    r = store.objects(GPUUsageRecord)[0]
    store.put(r.model_copy(update={"spec": r.spec.model_copy(update={"class_name": "other"})}))
    assert numbers(checker.check()) == ["(6)"]


def test_a_binding_change_without_an_event_violates_8(
    history: History, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a", note=False)
    assert numbers(checker.check()) == ["(8)"]


def test_violations_are_reported_once(history: History, checker: InvariantChecker) -> None:
    history.device("d1")
    history.bind("d1", "t/a", note=False)
    checker.check()
    assert checker.check() == [] and len(checker.violations) == 1


def test_check_all_judges_every_device(store: MemoryClient, history: History) -> None:
    history.device("d1", "n1")
    history.device("d2", "n2")
    history.bind("d1", "t/a")
    history.bind("d2", "t/a")
    late = InvariantChecker(store)
    assert late.check() == [] and numbers(late.check_all()) == ["(2)"]


async def test_a_pass_that_writes_violates_7(store: MemoryClient, history: History) -> None:
    async def noisy_pass() -> None:
        d = store.peek(GPUDevice, "d1")
        assert d is not None
        await store.update(
            d.model_copy(update={"metadata": d.metadata.model_copy(update={"labels": {"x": "y"}})})
        )

    history.device("d1")
    assert numbers(await quiet_pass(store, noisy_pass)) == ["(7)"]


async def test_a_pass_that_writes_nothing_keeps_7(store: MemoryClient) -> None:
    async def idle_pass() -> None:
        return None

    assert await quiet_pass(store, idle_pass) == []
