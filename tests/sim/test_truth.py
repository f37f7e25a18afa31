"""The sim's own truth of GPU time: the intervals it keeps from the store's writes, on the
true clock, whatever the binder's records or the machines' stamps say."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.pod import Pod
from gpu_binder.api.types import GPUDevice, RecordKind
from gpu_binder.sim.builders import slot_resource
from gpu_binder.sim.catalog import H100, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.truth import GroundTruth
from gpu_binder.sim.vmistatus import with_phase

from .builders import T0
from .histories import History


@pytest.fixture
def history(store: MemoryClient, clock: VirtualClock) -> History:
    store.put(gpu_class("h100", H100, "nvidia.com/H100"))
    return History(store, clock)


@pytest.fixture
def truth(store: MemoryClient, clock: VirtualClock, history: History) -> GroundTruth:
    return GroundTruth(store, clock.now)


def vmi(store: MemoryClient, vm: str, uid: str = "uid-1") -> VirtualMachineInstance:
    ns, _, name = vm.partition("/")
    raw = {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"domain": {"devices": {"gpus": [{"name": "g0", "deviceName": slot_resource(0)}]}}},
    }
    return store.put(VirtualMachineInstance.from_dict(raw))


def phase(store: MemoryClient, v: VirtualMachineInstance, to: str, stamp: timedelta) -> None:
    """The VMI in a new phase, its transition stamped by a clock `stamp` off the true one."""
    current = store.peek(VirtualMachineInstance, v.metadata.name, v.metadata.namespace)
    assert current is not None
    store.put(with_phase(current, to, store.clock() + stamp, node="n1"))


def admit(store: MemoryClient, v: VirtualMachineInstance, phase: str = "Running") -> None:
    """The VMI's launcher pod on n1, as the kubelet writes it once its device manager
    admitted it (Running) or refused it (Failed)."""
    current = store.peek(VirtualMachineInstance, v.metadata.name, v.metadata.namespace)
    assert current is not None
    raw = render_launcher_pod(current.to_dict())
    raw["metadata"]["name"] = f"virt-launcher-{v.metadata.name}"
    raw["spec"]["nodeName"] = "n1"
    raw["status"] = {"phase": phase}
    store.put(Pod.from_dict(raw))


def spans(truth: GroundTruth) -> list[tuple[RecordKind, str, float, float | None]]:
    return [
        (
            s.kind,
            s.owner,
            (s.start - T0).total_seconds(),
            None if s.end is None else (s.end - T0).total_seconds(),
        )
        for s in truth.stretches
    ]


def test_a_bound_device_is_reserved_until_a_domain_holds_it_and_again_after(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1")
    clock.advance(10)
    history.bind("d1", "t/a")
    v = vmi(store, "t/a")
    clock.advance(20)
    admit(store, v)
    clock.advance(5)
    phase(store, v, "Scheduled", timedelta(0))
    clock.advance(100)
    phase(store, v, "Succeeded", timedelta(0))
    clock.advance(7)
    history.release("d1")
    assert spans(truth) == [
        (RecordKind.RESERVED, "t/a", 10.0, 30.0),
        (RecordKind.ATTACHED, "uid-1", 30.0, 135.0),
        (RecordKind.RESERVED, "t/a", 135.0, 142.0),
    ]


def test_the_truth_is_the_true_clock_not_the_nodes_stamps(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    v = vmi(store, "t/a")
    clock.advance(30)
    admit(store, v)
    phase(store, v, "Running", timedelta(seconds=-600))
    clock.advance(60)
    phase(store, v, "Failed", timedelta(seconds=300))
    attached = [s for s in spans(truth) if s[0] == RecordKind.ATTACHED]
    assert attached == [(RecordKind.ATTACHED, "uid-1", 30.0, 90.0)]


async def test_a_deleted_vmi_holds_its_device_no_more(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1")
    v = vmi(store, "t/a")
    admit(store, v)
    clock.advance(40)
    await store.delete(VirtualMachineInstance, "a", "t")
    assert spans(truth) == [(RecordKind.ATTACHED, "uid-1", 0.0, 40.0)]


async def test_a_deleted_device_ends_its_reservation(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1")
    history.bind("d1", "t/a")
    clock.advance(15)
    await store.delete(GPUDevice, "d1")
    assert spans(truth) == [(RecordKind.RESERVED, "t/a", 0.0, 15.0)]
    assert truth.stretches[0].class_name == "h100"


def test_a_domain_holds_its_devices_from_its_pods_admission_not_its_scheduled_report(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    """The kubelet hands the pod its devices when it admits it; virt-controller reports
    the VMI Scheduled after the pod runs, seconds later when KubeVirt is busy."""
    history.device("d1")
    history.bind("d1", "t/a")
    v = vmi(store, "t/a")
    clock.advance(10)
    admit(store, v)
    clock.advance(3)
    phase(store, v, "Scheduled", timedelta(0))
    assert spans(truth) == [
        (RecordKind.RESERVED, "t/a", 0.0, 10.0),
        (RecordKind.ATTACHED, "uid-1", 10.0, None),
    ]


def test_a_scheduled_report_without_an_admitted_pod_holds_nothing(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    """A pod the device manager refused (Failed) was handed no device, whatever the VMI
    (its tenant's to write) says."""
    history.device("d1")
    history.bind("d1", "t/a")
    v = vmi(store, "t/a")
    admit(store, v, phase="Failed")
    clock.advance(10)
    phase(store, v, "Running", timedelta(0))
    assert spans(truth) == [(RecordKind.RESERVED, "t/a", 0.0, None)]


def test_a_pod_admitted_for_a_vmi_that_ended_holds_nothing(
    history: History, truth: GroundTruth, store: MemoryClient, clock: VirtualClock
) -> None:
    history.device("d1")
    v = vmi(store, "t/a")
    phase(store, v, "Failed", timedelta(0))
    admit(store, v)
    assert spans(truth) == []
