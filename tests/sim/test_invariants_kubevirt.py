"""The invariants the KubeVirt model lets the checker see: pods hold exactly their set's
slots on its node (9), an Attached device is one its VMI runs with (9b), and usage records
of one device never overlap nor end after now (11) — each found in a history that breaks
it, none in one that keeps it."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.types import GPUDevice, GPUUsageRecord, Phase, usage_record_name
from gpu_binder.sim.catalog import H100, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.invariants import InvariantChecker
from gpu_binder.sim.launcher import name_pod, render_launcher_pod
from gpu_binder.sim.memory import MemoryClient

from .histories import History

S0 = "gpu.cozystack.io/10de-2330-s0"
S1 = "gpu.cozystack.io/10de-2330-s1"


@pytest.fixture
def history(store: MemoryClient, clock: VirtualClock) -> History:
    store.put(gpu_class("h100", H100, "nvidia.com/H100"))
    return History(store, clock)


@pytest.fixture
def checker(store: MemoryClient, history: History) -> InvariantChecker:
    return InvariantChecker(store)


def numbers(violations: list[str]) -> list[str]:
    return sorted({v[: v.index(")") + 1] for v in violations})


def running_pod(
    store: MemoryClient, vmi: VirtualMachineInstance, node: str, *slots: str, temp: bool = False
) -> Pod:
    """The VMI's pod, running on node with the slot resources it asks for."""
    raw: dict[str, Any] = render_launcher_pod(
        {**vmi.to_dict(), "spec": {"domain": {"devices": {"gpus": [
            {"name": f"g{i}", "deviceName": s} for i, s in enumerate(slots)
        ]}}}},
        temp=temp,
    )  # fmt: skip
    raw = name_pod(raw, random.Random(0))
    raw["spec"]["nodeName"] = node
    raw["status"] = {"phase": "Running"}
    return store.put(Pod.from_dict(raw))


def set_on_n1(history: History, vm: str = "t/a") -> None:
    history.device("d0", "n1", 0)
    history.device("d1", "n1", 1)
    history.bind("d0", vm)
    history.bind("d1", vm)


# --- (9) -------------------------------------------------------------------------------


def test_a_pod_holding_its_sets_slots_on_its_node_keeps_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    vmi = history.run("t/a", "n1", "d0", "d1")
    running_pod(store, vmi, "n1", S0, S1)
    assert checker.check() == []


def test_a_pod_holding_another_nodes_slot_violates_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    history.device("e0", "n2", 0)
    history.bind("e0", "t/other")
    checker.check()
    vmi = history.run("t/a", "n2")
    # Its pod lost the pin (the VM controller's affinity sync) and went to n2, whose s0
    # is another tenant's GPU.
    running_pod(store, vmi, "n2", S0)
    assert numbers(checker.check()) == ["(9)"]


def test_a_pod_holding_part_of_its_set_violates_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    vmi = history.run("t/a", "n1", "d0")
    running_pod(store, vmi, "n1", S0)
    assert numbers(checker.check()) == ["(9)"]


def test_a_pod_holding_slots_of_no_set_violates_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d0", "n1", 0)
    vmi = history.run("t/a", "n1")
    running_pod(store, vmi, "n1", S0)
    assert numbers(checker.check()) == ["(9)"]


def test_a_temporary_pod_on_another_node_violates_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    history.device("e0", "n2", 0)
    history.device("e1", "n2", 1)
    checker.check()
    vmi = history.run("t/a", "n1")
    running_pod(store, vmi, "n2", S0, S1, temp=True)
    assert numbers(checker.check()) == ["(9)"]


def test_a_set_growing_under_a_running_pod_violates_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d0", "n1", 0)
    history.device("d1", "n1", 1)
    history.bind("d0", "t/a")
    vmi = history.run("t/a", "n1", "d0")
    running_pod(store, vmi, "n1", S0)
    lawful = checker.check()
    history.bind("d1", "t/a")  # adopting a free GPU the guest does not have
    assert lawful == [] and numbers(checker.check()) == ["(9)"]


def test_a_pod_that_ended_holds_nothing(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d0", "n1", 0)
    vmi = history.run("t/a", "n1")
    pod = running_pod(store, vmi, "n1", S0)
    raw = pod.to_dict()
    raw["status"] = {"phase": "Succeeded"}
    store.put(Pod.from_dict(raw))
    assert checker.check() == []


def test_a_launcher_pod_still_running_after_its_vmi_ended_is_not_judged_by_9(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    """The guest is off once virt-handler reports the VMI final; the pod may read Running
    for long after (its node's kubelet down) while the binder releases the set."""
    set_on_n1(history)
    vmi = history.run("t/a", "n1", "d0", "d1")
    running_pod(store, vmi, "n1", S0, S1)
    checker.check()
    history.end(vmi)
    history.release("d0")
    history.release("d1")
    assert checker.check() == []


def test_a_temporary_pod_off_its_set_violates_9_whatever_its_vmi(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    history.device("d0", "n1", 0)
    vmi = history.end(history.run("t/a", "n1"))
    running_pod(store, vmi, "n1", S0, temp=True)
    assert numbers(checker.check()) == ["(9)"]


# --- (9b) ------------------------------------------------------------------------------


def test_a_device_attached_to_a_vmi_whose_pod_holds_it_keeps_9b(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    vmi = history.run("t/a", "n1", "d0", "d1")
    running_pod(store, vmi, "n1", S0, S1)
    history.attach("d0", vmi)
    history.attach("d1", vmi)
    assert checker.check() == []


def test_a_device_attached_to_a_vmi_that_runs_without_it_violates_9b(
    store: MemoryClient, history: History, checker: InvariantChecker
) -> None:
    set_on_n1(history)
    history.device("d2", "n1", 2)
    vmi = history.run("t/a", "n1", "d0", "d1")
    running_pod(store, vmi, "n1", S0, S1)
    checker.check()
    history.bind("d2", "t/a", note=False)
    history.attach("d2", vmi)
    assert "(9b)" in numbers(checker.check())


def test_a_vmi_no_pod_runs_is_not_judged_by_9b(history: History, checker: InvariantChecker) -> None:
    set_on_n1(history)
    vmi = history.run("t/a", "n1", "d0", "d1")
    history.attach("d0", vmi)
    assert checker.check() == []


# --- (11) ------------------------------------------------------------------------------


def record(
    store: MemoryClient, vmi: str, device: str, start: Any, end: Any = None
) -> GPUUsageRecord:
    spec: dict[str, Any] = {
        "vm": vmi,
        "vmi": {"name": vmi, "uid": f"uid-{vmi}"},
        "device": device,
        "start": start,
    }
    if end is not None:
        spec["end"] = end
    return store.put(
        GPUUsageRecord.model_validate(
            {
                "metadata": {"name": usage_record_name(f"uid-{vmi}", device), "namespace": "t"},
                "spec": spec,
            }
        )
    )


def test_records_of_one_device_one_after_the_other_keep_11(
    store: MemoryClient, clock: VirtualClock, checker: InvariantChecker
) -> None:
    t0 = clock.now()
    clock.advance(60)
    record(store, "a", "d1", t0, t0 + timedelta(seconds=30))
    record(store, "b", "d1", t0 + timedelta(seconds=30))
    assert checker.check() == []


def test_two_records_of_one_device_billing_the_same_seconds_violate_11(
    store: MemoryClient, clock: VirtualClock, checker: InvariantChecker
) -> None:
    t0 = clock.now()
    clock.advance(60)
    record(store, "a", "d1", t0, t0 + timedelta(seconds=30))
    # The next VMI's start came from a node clock behind the last one's finish.
    record(store, "b", "d1", t0 + timedelta(seconds=20))
    assert numbers(checker.check()) == ["(11)"]


def test_two_open_records_of_one_device_violate_11(
    store: MemoryClient, clock: VirtualClock, checker: InvariantChecker
) -> None:
    record(store, "a", "d1", clock.now())
    clock.advance(5)
    record(store, "b", "d1", clock.now())
    assert numbers(checker.check()) == ["(11)"]


def test_a_record_that_ends_after_now_violates_11(
    store: MemoryClient, clock: VirtualClock, checker: InvariantChecker
) -> None:
    t0 = clock.now()
    record(store, "a", "d1", t0)
    clock.advance(60)
    # Closed with the finish time of a node whose clock is 5 minutes ahead.
    record(store, "a", "d1", t0, clock.now() + timedelta(minutes=5))
    assert numbers(checker.check()) == ["(11)"]


def test_records_of_two_devices_may_overlap(
    store: MemoryClient, clock: VirtualClock, checker: InvariantChecker
) -> None:
    record(store, "a", "d1", clock.now())
    record(store, "a", "d2", clock.now())
    assert checker.check() == []


def test_a_record_clamped_to_now_is_closed_with_the_finish_time_for_6(
    store: MemoryClient, history: History, clock: VirtualClock, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    vmi = history.run("t/a", "n1", "d1")
    history.attach("d1", vmi)
    checker.check()
    clock.advance(60)
    ahead = clock.now() + timedelta(minutes=5)
    raw = vmi.to_dict()
    raw["status"]["phase"] = "Succeeded"
    raw["status"]["phaseTransitionTimestamps"].append(
        {"phase": "Succeeded", "phaseTransitionTimestamp": ahead.isoformat()}
    )
    ended = store.put(VirtualMachineInstance.from_dict(raw))
    history.detach("d1", ended, end=clock.now())  # the binder clamps the future finish
    assert checker.check() == []


# --- (4) with skewed clocks -------------------------------------------------------------


def test_a_reset_stamped_by_a_node_clock_behind_the_binders_still_cleans_for_4(
    store: MemoryClient, history: History, clock: VirtualClock, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    history.release("d1")
    clock.advance(1)
    d = store.peek(GPUDevice, "d1")
    assert d is not None
    behind = clock.now() - timedelta(minutes=8)
    spec = d.spec.model_copy(update={"last_reset": behind, "last_reset_for": d.status.released_at})
    store.put(d.model_copy(update={"spec": spec}))
    history.status("d1", note=False, phase=Phase.AVAILABLE)
    history.bind("d1", "t/b")
    assert checker.check() == []


def test_a_reset_written_before_the_release_does_not_clean_for_4(
    store: MemoryClient, history: History, clock: VirtualClock, checker: InvariantChecker
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    clock.advance(60)
    d = store.peek(GPUDevice, "d1")
    assert d is not None
    # A reset the node's clock, minutes ahead, stamped after the coming release.
    ahead = clock.now() + timedelta(minutes=8)
    store.put(d.model_copy(update={"spec": d.spec.model_copy(update={"last_reset": ahead})}))
    history.release("d1")
    history.status("d1", note=False, phase=Phase.AVAILABLE)
    history.bind("d1", "t/b")
    assert numbers(checker.check()) == ["(4)"]
