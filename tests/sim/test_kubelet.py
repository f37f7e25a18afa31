"""The simulated kubelet starts a VMI only on free device resources and records its end."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.kubelet import VMI_FINALIZER, Kubelet, with_phase
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import create_node, set_allocatable, set_ready

SLOT0 = "gpu.cozystack.io/10de-2330-s0"
SLOT1 = "gpu.cozystack.io/10de-2330-s1"


@pytest.fixture
async def kubelet(store: MemoryClient, clock: VirtualClock) -> Kubelet:
    await create_node(store, "n1", clock.now())
    await set_allocatable(store, "n1", {SLOT0: 1, SLOT1: 1, "nvidia.com/L40S": 2})
    return Kubelet(store, clock.now)


async def scheduled(
    store: MemoryClient, clock: VirtualClock, name: str, *resources: str, **meta: Any
) -> VirtualMachineInstance:
    gpus = [{"name": f"g{i}", "deviceName": r} for i, r in enumerate(resources)]
    raw = {
        "metadata": {"name": name, "namespace": "t", **meta},
        "spec": {"domain": {"devices": {"gpus": gpus}}},
    }
    vmi = await store.create(VirtualMachineInstance.from_dict(raw))
    return await store.update_status(with_phase(vmi, "Scheduled", clock.now(), node="n1"))


def phase(store: MemoryClient, name: str) -> str:
    vmi = store.peek(VirtualMachineInstance, name, "t")
    return vmi.phase if vmi is not None else "gone"


async def test_a_scheduled_vmi_on_free_slots_starts_running(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0, SLOT1)
    await kubelet.step()
    assert phase(store, "a") == "Running"


async def test_a_vmi_naming_a_slot_the_node_does_not_serve_fails(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", "gpu.cozystack.io/10de-2330-s7")
    await kubelet.step()
    vmi = store.peek(VirtualMachineInstance, "a", "t")
    assert vmi is not None and vmi.phase == "Failed"
    assert vmi.raw["status"]["reason"] == "UnexpectedAdmissionError"


async def test_a_vmi_naming_a_slot_a_running_vmi_holds_fails(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0)
    await kubelet.step()
    await scheduled(store, clock, "b", SLOT0)
    await kubelet.step()
    assert (phase(store, "a"), phase(store, "b")) == ("Running", "Failed")


async def test_a_count_resource_starts_as_many_vmis_as_it_has_units(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    for name in ("a", "b", "c"):
        await scheduled(store, clock, name, "nvidia.com/L40S")
        await kubelet.step()
    assert [phase(store, n) for n in "abc"] == ["Running", "Running", "Failed"]


async def test_a_slot_is_free_again_once_its_vmi_ended(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0)
    await kubelet.step()
    await kubelet.finish("t", "a")
    await scheduled(store, clock, "b", SLOT0)
    await kubelet.step()
    assert phase(store, "b") == "Running"


async def test_a_vmi_on_a_node_that_is_not_ready_waits(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await set_ready(store, "n1", False, clock.now())
    await scheduled(store, clock, "a", SLOT0)
    await kubelet.step()
    waited = phase(store, "a")
    await set_ready(store, "n1", True, clock.now())
    await kubelet.step()
    assert (waited, phase(store, "a")) == ("Scheduled", "Running")


async def test_a_finished_vmi_carries_its_finish_time(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0)
    await kubelet.step()
    clock.advance(90)
    vmi = await kubelet.finish("t", "a")
    assert vmi is not None and (vmi.phase, vmi.finished_at) == ("Succeeded", clock.now())


async def test_a_deleted_running_vmi_succeeds_with_a_finish_time_then_goes(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0, finalizers=[VMI_FINALIZER])
    await kubelet.step()
    seen: list[tuple[str, Any]] = []
    store.subscribe(lambda kind, e: seen.append((e.object.phase, e.object.finished_at)))
    clock.advance(30)
    await store.delete(VirtualMachineInstance, "a", "t")
    await kubelet.step()
    assert phase(store, "a") == "gone"
    assert ("Succeeded", clock.now()) in seen


async def test_a_deleted_vmi_that_never_ran_ends_failed(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await set_ready(store, "n1", False, clock.now())
    await scheduled(store, clock, "a", SLOT0, finalizers=[VMI_FINALIZER])
    phases: list[str] = []
    store.subscribe(lambda kind, e: phases.append(e.object.phase))
    await store.delete(VirtualMachineInstance, "a", "t")
    await kubelet.step()
    assert "Failed" in phases and phase(store, "a") == "gone"


async def test_a_failed_node_fails_every_live_vmi_on_it(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0)
    await scheduled(store, clock, "b", SLOT1)
    await kubelet.step()
    assert await kubelet.fail_node("n1") == 2
    assert (phase(store, "a"), phase(store, "b")) == ("Failed", "Failed")


async def test_a_step_with_nothing_to_do_writes_nothing(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await scheduled(store, clock, "a", SLOT0)
    await kubelet.step()
    assert await kubelet.step() == 0
