"""Every runStrategy as KubeVirt's VM controller runs it, and virtctl start/stop on each."""

from __future__ import annotations

import pytest

from gpu_binder.sim.builders import vm_object
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.runstrategy import StrategyError, run_strategy

from .kubevirt_world import SLOT0, KubeVirtWorld


@pytest.fixture
async def kv(store: MemoryClient, clock: VirtualClock) -> KubeVirtWorld:
    world = KubeVirtWorld(store, clock)
    await world.node("n1", {SLOT0: 1})
    return world


async def vm(kv: KubeVirtWorld, strategy: str | None = None, running: bool = False) -> str:
    created = await kv.store.create(
        vm_object("vm1", "t", [SLOT0], running=running, run_strategy=strategy)
    )
    await kv.settle()
    return created.metadata.uid


def uid(kv: KubeVirtWorld) -> str:
    found = kv.vmi()
    return found.metadata.uid if found is not None else ""


async def ends(kv: KubeVirtWorld, phase: str = "Succeeded") -> str:
    """The guest ends on its own; returns the ended VMI's uid."""
    before = uid(kv)
    await kv.kubelet.finish("t", "vm1", phase)
    await kv.settle()
    return before


@pytest.mark.parametrize(
    ("spec", "strategy"),
    [
        ({"running": True}, "Always"),
        ({"running": False}, "Halted"),
        ({}, "Halted"),
        ({"runStrategy": "Manual"}, "Manual"),
    ],
)
def test_spec_running_maps_to_a_run_strategy(spec: dict[str, object], strategy: str) -> None:
    assert run_strategy({"spec": spec}) == strategy


def test_running_and_a_run_strategy_together_are_an_error() -> None:
    with pytest.raises(StrategyError):
        run_strategy({"spec": {"running": True, "runStrategy": "Always"}})


async def test_always_replaces_a_vmi_that_ended(kv: KubeVirtWorld) -> None:
    await vm(kv, "Always")
    first = await ends(kv)
    assert uid(kv) not in ("", first) and kv.phase() == "Running"


async def test_rerun_on_failure_starts_at_once_and_stays_stopped_after_success(
    kv: KubeVirtWorld,
) -> None:
    await vm(kv, "RerunOnFailure")
    ran = kv.phase()
    await ends(kv, "Succeeded")
    assert (ran, kv.phase()) == ("Running", "gone")


async def test_rerun_on_failure_starts_again_after_a_failure(
    kv: KubeVirtWorld, clock: VirtualClock
) -> None:
    await vm(kv, "RerunOnFailure")
    first = await ends(kv, "Failed")
    clock.advance(1)
    await kv.settle()
    assert uid(kv) not in ("", first) and kv.phase() == "Running"


async def test_once_runs_one_vmi_and_keeps_it_when_it_ended(kv: KubeVirtWorld) -> None:
    await vm(kv, "Once")
    first = await ends(kv, "Succeeded")
    assert (uid(kv), kv.phase()) == (first, "Succeeded")


async def test_manual_starts_on_a_start_request_only(kv: KubeVirtWorld) -> None:
    await vm(kv, "Manual")
    before = kv.phase()
    assert await kv.kubevirt.set_running("t", "vm1", True) is None
    await kv.settle()
    assert (before, kv.phase()) == ("gone", "Running")


async def test_manual_keeps_an_ended_vmi_until_started_again(kv: KubeVirtWorld) -> None:
    await vm(kv, "Manual")
    await kv.kubevirt.set_running("t", "vm1", True)
    await kv.settle()
    first = await ends(kv)
    kept = (uid(kv), kv.phase())
    await kv.kubevirt.set_running("t", "vm1", True)
    await kv.settle()
    assert kept == (first, "Succeeded")
    assert uid(kv) not in ("", first) and kv.phase() == "Running"


async def test_manual_stops_on_a_stop_request(kv: KubeVirtWorld) -> None:
    await vm(kv, "Manual")
    await kv.kubevirt.set_running("t", "vm1", True)
    await kv.settle()
    assert await kv.kubevirt.set_running("t", "vm1", False) is None
    await kv.settle()
    vm1 = kv.vm()
    assert kv.phase() == "gone" and vm1 is not None
    assert "stateChangeRequests" not in vm1.raw["status"]


async def test_halted_runs_nothing_until_started_then_becomes_always(kv: KubeVirtWorld) -> None:
    await vm(kv, "Halted")
    before = kv.phase()
    await kv.kubevirt.set_running("t", "vm1", True)
    await kv.settle()
    vm1 = kv.vm()
    assert (before, kv.phase()) == ("gone", "Running")
    assert vm1 is not None and vm1.raw["spec"]["runStrategy"] == "Always"


async def test_stopping_always_or_once_makes_it_halted(kv: KubeVirtWorld) -> None:
    await vm(kv, "Once")
    await kv.kubevirt.set_running("t", "vm1", False)
    await kv.settle()
    vm1 = kv.vm()
    assert kv.phase() == "gone" and vm1 is not None
    assert vm1.raw["spec"]["runStrategy"] == "Halted"


async def test_always_and_once_refuse_a_start_request(kv: KubeVirtWorld) -> None:
    await vm(kv, "Once")
    await ends(kv)
    refused = await kv.kubevirt.set_running("t", "vm1", True)
    assert refused == "Once does not support manual start requests"


async def test_a_running_vm_refuses_a_start(kv: KubeVirtWorld) -> None:
    await vm(kv, "Always")
    assert await kv.kubevirt.set_running("t", "vm1", True) == "VM is already running"


async def test_the_deprecated_running_field_starts_and_stops(kv: KubeVirtWorld) -> None:
    await vm(kv, running=False)
    await kv.kubevirt.set_running("t", "vm1", True)
    await kv.settle()
    started = kv.phase()
    await kv.kubevirt.set_running("t", "vm1", False)
    await kv.settle()
    vm1 = kv.vm()
    assert (started, kv.phase()) == ("Running", "gone")
    assert vm1 is not None and vm1.raw["spec"]["running"] is False


async def test_wait_as_receiver_creates_a_receiver_vmi_that_gets_no_pod(
    kv: KubeVirtWorld,
) -> None:
    await vm(kv, "WaitAsReceiver")
    vmi = kv.vmi()
    assert vmi is not None and vmi.phase == "WaitingForSync" and kv.pods() == []
    assert vmi.metadata.annotations["kubevirt.io/create-migration-target"] == "true"


async def test_the_vm_status_says_its_strategy_once_it_ran(kv: KubeVirtWorld) -> None:
    await vm(kv, "RerunOnFailure")
    vm1 = kv.vm()
    assert vm1 is not None and vm1.raw["status"]["runStrategy"] == "RerunOnFailure"
    assert vm1.raw["status"]["printableStatus"] == "Running"
