"""The simulated kubelets run pods with the units they ask for; virt-handler runs and ends
the VMIs handed to it, by its node's clock."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.clocks import Clocks
from gpu_binder.sim.kubelet import VMI_FINALIZER, Kubelet, with_phase
from gpu_binder.sim.launcher import VIRTUALIZATION_DEVICES, name_pod, render_launcher_pod
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import create_node, set_allocatable, set_ready
from gpu_binder.sim.retry import modify, wire

from .kubevirt_world import SLOT0, SLOT1

L40S = "nvidia.com/L40S"


@pytest.fixture
def clocks(clock: VirtualClock) -> Clocks:
    return Clocks(clock.now, skew=600, seed=3)


@pytest.fixture
async def kubelet(store: MemoryClient, clock: VirtualClock, clocks: Clocks) -> Kubelet:
    await create_node(store, "n1", clock.now())
    await set_allocatable(store, "n1", {SLOT0: 1, SLOT1: 1, L40S: 2})
    return Kubelet(store, clocks)


def vmi_raw(name: str, *resources: str, **meta: Any) -> dict[str, Any]:
    gpus = [{"name": f"g{i}", "deviceName": r} for i, r in enumerate(resources)]
    return {
        "metadata": {"name": name, "namespace": "t", **meta},
        "spec": {"domain": {"devices": {"gpus": gpus}}},
    }


async def vmi_in(
    store: MemoryClient, clock: VirtualClock, name: str, phase: str, *resources: str, **meta: Any
) -> VirtualMachineInstance:
    vmi = await store.create(VirtualMachineInstance.from_dict(vmi_raw(name, *resources, **meta)))
    return await store.update_status(with_phase(vmi, phase, clock.now(), node="n1"))


async def bound_pod(store: MemoryClient, vmi: VirtualMachineInstance, *, temp: bool = False) -> Pod:
    raw = name_pod(render_launcher_pod(vmi.to_dict(), temp=temp), random.Random(0))
    raw["spec"]["nodeName"] = "n1"
    return await store.create(Pod.from_dict(raw))


def pod_phase(store: MemoryClient, pod: Pod) -> str:
    found = store.peek(Pod, pod.metadata.name, "t")
    return found.phase if found is not None else "gone"


def vmi_phase(store: MemoryClient, name: str) -> str:
    vmi = store.peek(VirtualMachineInstance, name, "t")
    return vmi.phase if vmi is not None else "gone"


async def test_a_bound_pod_runs_holding_the_units_it_asks_for(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    vmi = await vmi_in(store, clock, "a", "Scheduling", SLOT0, SLOT1)
    pod = await bound_pod(store, vmi)
    await kubelet.step()
    assert pod_phase(store, pod) == "Running"
    assert kubelet.in_use("n1") == {SLOT0: 1, SLOT1: 1, **dict.fromkeys(VIRTUALIZATION_DEVICES, 1)}


async def test_a_pod_asking_for_a_slot_the_node_does_not_serve_fails_admission(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    vmi = await vmi_in(store, clock, "a", "Scheduling", "gpu.cozystack.io/10de-2330-s7")
    pod = await bound_pod(store, vmi)
    await kubelet.step()
    found = store.peek(Pod, pod.metadata.name, "t")
    assert found is not None and found.phase == "Failed"
    assert found.raw["status"]["reason"] == "UnexpectedAdmissionError"


async def test_a_pod_asking_for_a_slot_a_running_pod_holds_fails_admission(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    first = await bound_pod(store, await vmi_in(store, clock, "a", "Scheduling", SLOT0))
    await kubelet.step()
    second = await bound_pod(store, await vmi_in(store, clock, "b", "Scheduling", SLOT0))
    await kubelet.step()
    assert (pod_phase(store, first), pod_phase(store, second)) == ("Running", "Failed")


async def test_a_count_resource_runs_as_many_pods_as_it_has_units(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    pods = []
    for name in "abc":
        pods.append(await bound_pod(store, await vmi_in(store, clock, name, "Scheduling", L40S)))
        await kubelet.step()
    assert [pod_phase(store, p) for p in pods] == ["Running", "Running", "Failed"]


async def test_a_pod_on_a_node_that_is_not_ready_waits(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await set_ready(store, "n1", False, clock.now())
    pod = await bound_pod(store, await vmi_in(store, clock, "a", "Scheduling", SLOT0))
    await kubelet.step()
    waited = pod_phase(store, pod)
    await set_ready(store, "n1", True, clock.now())
    await kubelet.step()
    assert (waited, pod_phase(store, pod)) == ("Pending", "Running")


async def test_the_temporary_pod_exits_once_it_ran(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    pod = await bound_pod(store, await vmi_in(store, clock, "a", "Pending", SLOT0), temp=True)
    await kubelet.step()
    ran = pod_phase(store, pod)
    await kubelet.step()
    assert (ran, pod_phase(store, pod)) == ("Running", "Succeeded")
    assert kubelet.in_use("n1")[SLOT0] == 0


async def test_a_launcher_pod_exits_once_its_vmi_ended(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    vmi = await vmi_in(store, clock, "a", "Scheduled", SLOT0)
    pod = await bound_pod(store, vmi)
    await kubelet.step()
    await kubelet.step()
    running = (vmi_phase(store, "a"), pod_phase(store, pod))
    await kubelet.finish("t", "a")
    await kubelet.step()
    assert running == ("Running", "Running")
    assert pod_phase(store, pod) == "Succeeded"


async def test_a_deleted_pod_waits_for_its_guest_to_shut_down_then_goes(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    vmi = await vmi_in(store, clock, "a", "Scheduled", SLOT0, finalizers=[VMI_FINALIZER])
    pod = await bound_pod(store, vmi)
    await kubelet.step()
    await kubelet.step()
    await store.delete(Pod, pod.metadata.name, "t")
    still = pod_phase(store, pod)
    await store.delete(VirtualMachineInstance, "a", "t")
    await kubelet.step()
    assert still == "Running"
    assert (vmi_phase(store, "a"), pod_phase(store, pod)) == ("Succeeded", "gone")


async def test_a_scheduled_vmi_runs_from_the_time_of_its_nodes_clock(
    store: MemoryClient, clock: VirtualClock, clocks: Clocks, kubelet: Kubelet
) -> None:
    await vmi_in(store, clock, "a", "Scheduled", SLOT0)
    await kubelet.step()
    vmi = store.peek(VirtualMachineInstance, "a", "t")
    stamps = {t["phase"]: t["phaseTransitionTimestamp"] for t in vmi.raw["status"][
        "phaseTransitionTimestamps"
    ]} if vmi is not None else {}  # fmt: skip
    assert vmi is not None and vmi.phase == "Running"
    assert stamps["Running"] == (clock.now() + clocks.offset("n1")).isoformat().replace(
        "+00:00", "Z"
    )
    assert clocks.offset("n1") != timedelta(0)


async def test_a_deleted_running_vmi_succeeds_with_its_nodes_finish_time(
    store: MemoryClient, clock: VirtualClock, clocks: Clocks, kubelet: Kubelet
) -> None:
    await vmi_in(store, clock, "a", "Running", SLOT0, finalizers=[VMI_FINALIZER])
    seen: list[tuple[str, Any]] = []
    store.subscribe(lambda kind, e: seen.append((e.object.phase, e.object.finished_at)))
    clock.advance(30)
    await store.delete(VirtualMachineInstance, "a", "t")
    await kubelet.step()
    assert ("Succeeded", clock.now() + clocks.offset("n1")) in seen


async def test_a_deleted_vmi_that_never_ran_ends_failed(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await vmi_in(store, clock, "a", "Scheduled", SLOT0, finalizers=[VMI_FINALIZER])
    await store.delete(VirtualMachineInstance, "a", "t")
    await kubelet.step()
    assert vmi_phase(store, "a") == "Failed"


async def test_a_vmi_on_a_node_that_is_not_ready_waits_for_its_virt_handler(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await set_ready(store, "n1", False, clock.now())
    await vmi_in(store, clock, "a", "Scheduled", SLOT0)
    await kubelet.step()
    waited = vmi_phase(store, "a")
    await set_ready(store, "n1", True, clock.now())
    await kubelet.step()
    assert (waited, vmi_phase(store, "a")) == ("Scheduled", "Running")


async def test_a_guest_that_powers_off_ends_its_vmi_with_a_finish_time(
    store: MemoryClient, clock: VirtualClock, clocks: Clocks, kubelet: Kubelet
) -> None:
    await vmi_in(store, clock, "a", "Running", SLOT0)
    clock.advance(90)
    vmi = await kubelet.finish("t", "a")
    assert vmi is not None and vmi.phase == "Succeeded"
    assert vmi.finished_at == clock.now() + clocks.offset("n1")


async def test_a_failed_node_fails_every_live_vmi_on_it(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await vmi_in(store, clock, "a", "Running", SLOT0)
    await vmi_in(store, clock, "b", "Scheduled", SLOT1)
    assert await kubelet.fail_node("n1") == 2
    assert (vmi_phase(store, "a"), vmi_phase(store, "b")) == ("Failed", "Failed")


async def test_a_step_with_nothing_to_do_writes_nothing(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await bound_pod(store, await vmi_in(store, clock, "a", "Scheduling", SLOT0))
    await kubelet.step()
    assert await kubelet.step() == 0


async def test_a_pending_pod_deleted_goes_at_once(
    store: MemoryClient, clock: VirtualClock, kubelet: Kubelet
) -> None:
    await set_ready(store, "n1", False, clock.now())
    pod = await bound_pod(store, await vmi_in(store, clock, "a", "Scheduling", SLOT0))

    def unbind(p: Pod) -> Pod:
        raw = wire(p)
        raw["spec"].pop("nodeName")
        return Pod.from_dict(raw)

    await modify(store, Pod, pod.metadata.name, "t", unbind)
    await store.delete(Pod, pod.metadata.name, "t")
    assert pod_phase(store, pod) == "gone"
