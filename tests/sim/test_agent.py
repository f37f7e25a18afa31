"""Simulated node agents create GPUDevices, serve slot resources and reset released GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import GPUDevice, Phase, device_name
from gpu_binder.sim.agent import AgentFleet, pci_address
from gpu_binder.sim.catalog import H100, L40S, gpu_class
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import VIRT_HANDLER_UNITS, create_node

H100_CLASS = gpu_class("h100", H100, "nvidia.com/H100")


@pytest.fixture
def fleet(store: MemoryClient, clock: VirtualClock) -> AgentFleet:
    return AgentFleet(store, clock.now)


def devices_of(store: MemoryClient, node: str) -> list[GPUDevice]:
    return sorted(
        (d for d in store.objects(GPUDevice) if d.spec.node_name == node),
        key=lambda d: d.spec.slot or 0,
    )


def allocatable(store: MemoryClient, node: str) -> dict[str, int]:
    """The node's units of the GPU device plugins (virt-handler's own are always there)."""
    n = store.peek(Node, node)
    assert n is not None
    return {k: v for k, v in n.allocatable.items() if k not in VIRT_HANDLER_UNITS}


async def test_a_node_serves_virt_handlers_device_plugins(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n0", clock.now())
    n = store.peek(Node, "n0")
    assert n is not None and n.allocatable == VIRT_HANDLER_UNITS


async def released(store: MemoryClient, d: GPUDevice, clock: VirtualClock) -> GPUDevice:
    status = d.status.model_copy(update={"phase": Phase.CLEANING, "released_at": clock.now()})
    return await store.update_status(d.model_copy(update={"status": status}))


async def test_a_new_node_gets_one_device_per_gpu_named_by_node_and_pci(
    store: MemoryClient, fleet: AgentFleet
) -> None:
    await fleet.add_node("n1", 4)
    names = [d.name for d in devices_of(store, "n1")]
    assert names == [device_name("n1", pci_address(p)) for p in range(4)]


async def test_slots_count_from_zero(store: MemoryClient, fleet: AgentFleet) -> None:
    await fleet.add_node("n1", 4)
    assert [d.spec.slot for d in devices_of(store, "n1")] == [0, 1, 2, 3]


async def test_numa_node_is_the_slot_over_half_the_gpus(
    store: MemoryClient, fleet: AgentFleet
) -> None:
    await fleet.add_node("n1", 8)
    assert [d.spec.numa_node for d in devices_of(store, "n1")] == [0, 0, 0, 0, 1, 1, 1, 1]


async def test_devices_report_the_model_ids_vfio_driver_and_health(
    store: MemoryClient, fleet: AgentFleet
) -> None:
    await fleet.add_node("n1", 1)
    s = devices_of(store, "n1")[0].spec
    assert (s.vendor_id, s.device_id, s.driver, s.health) == (
        "0x10de",
        "0x2330",
        "vfio-pci",
        "Healthy",
    )


async def test_sxm_gpus_report_an_nvlink_domain_and_pcie_cards_none(
    store: MemoryClient, fleet: AgentFleet
) -> None:
    await fleet.add_node("sxm", 2)
    await fleet.add_node("pcie", 2, L40S)
    assert devices_of(store, "sxm")[0].spec.nvlink_domain
    assert devices_of(store, "pcie")[0].spec.nvlink_domain is None


async def test_a_device_class_is_served_as_one_slot_resource_per_gpu(
    store: MemoryClient, fleet: AgentFleet, classify: Any
) -> None:
    await store.create(H100_CLASS)
    await fleet.add_node("n1", 2)
    await classify(H100_CLASS)
    await fleet.step()
    assert allocatable(store, "n1") == {
        "gpu.cozystack.io/10de-2330-s0": 1,
        "gpu.cozystack.io/10de-2330-s1": 1,
    }


async def test_a_node_class_is_served_by_count(
    store: MemoryClient, fleet: AgentFleet, classify: Any
) -> None:
    cls = gpu_class("h100", H100, "nvidia.com/H100", pinning="Node")
    await store.create(cls)
    await fleet.add_node("n1", 3)
    await classify(cls)
    await fleet.step()
    assert allocatable(store, "n1") == {"nvidia.com/H100": 3}


async def test_devices_of_no_class_are_not_served(store: MemoryClient, fleet: AgentFleet) -> None:
    await fleet.add_node("n1", 2)
    await fleet.step()
    assert allocatable(store, "n1") == {}


async def test_an_unhealthy_gpu_is_reported_and_no_longer_served(
    store: MemoryClient, fleet: AgentFleet, classify: Any
) -> None:
    await store.create(H100_CLASS)
    await fleet.add_node("n1", 2)
    await classify(H100_CLASS)
    sick = devices_of(store, "n1")[1]
    fleet.set_health(sick.name, False, "Xid 79")
    await fleet.step()
    d = store.peek(GPUDevice, sick.name)
    assert d is not None and (d.spec.health, d.spec.health_message) == ("Unhealthy", "Xid 79")
    assert allocatable(store, "n1") == {"gpu.cozystack.io/10de-2330-s0": 1}


async def test_a_stopped_device_plugin_serves_nothing(
    store: MemoryClient, fleet: AgentFleet, classify: Any
) -> None:
    await store.create(H100_CLASS)
    await fleet.add_node("n1", 2)
    await classify(H100_CLASS)
    fleet.set_plugin("n1", False)
    await fleet.step()
    assert allocatable(store, "n1") == {}


async def test_a_released_device_is_reset(
    store: MemoryClient, fleet: AgentFleet, clock: VirtualClock
) -> None:
    await fleet.add_node("n1", 1)
    d = await released(store, devices_of(store, "n1")[0], clock)
    clock.advance(5)
    await fleet.step()
    reset = store.peek(GPUDevice, d.name)
    assert reset is not None and reset.spec.last_reset == clock.now()


async def test_a_released_device_is_reset_once_for_its_release(
    store: MemoryClient, fleet: AgentFleet, clock: VirtualClock
) -> None:
    await fleet.add_node("n1", 1)
    d = await released(store, devices_of(store, "n1")[0], clock)
    clock.advance(5)
    await fleet.step()
    clock.advance(5)
    await fleet.step()
    reset = store.peek(GPUDevice, d.name)
    assert reset is not None and reset.spec.last_reset_for == d.status.released_at
    assert fleet.resets_done == 1


async def test_a_reset_takes_the_reset_delay(store: MemoryClient, clock: VirtualClock) -> None:
    fleet = AgentFleet(store, clock.now, reset_delay=30)
    await fleet.add_node("n1", 1)
    d = await released(store, devices_of(store, "n1")[0], clock)
    clock.advance(10)
    await fleet.step()
    first = store.peek(GPUDevice, d.name)
    clock.advance(20)
    await fleet.step()
    second = store.peek(GPUDevice, d.name)
    assert first is not None and first.spec.last_reset is None
    assert second is not None and second.spec.last_reset == clock.now()


async def test_a_lost_node_resets_nothing_until_it_returns(
    store: MemoryClient, fleet: AgentFleet, clock: VirtualClock
) -> None:
    await fleet.add_node("n1", 1)
    await fleet.lose_node("n1")
    d = await released(store, devices_of(store, "n1")[0], clock)
    await fleet.step()
    during = store.peek(GPUDevice, d.name)
    await fleet.restore_node("n1")
    await fleet.step()
    after = store.peek(GPUDevice, d.name)
    assert during is not None and during.spec.last_reset is None
    assert after is not None and after.spec.last_reset is not None


async def test_a_lost_node_is_not_ready_since_the_loss(
    store: MemoryClient, fleet: AgentFleet, clock: VirtualClock
) -> None:
    await fleet.add_node("n1", 1)
    clock.advance(60)
    await fleet.lose_node("n1")
    node = store.peek(Node, "n1")
    assert node is not None and (node.ready, node.ready_since) == (False, clock.now())


async def test_a_new_gpu_takes_the_lowest_free_slot(store: MemoryClient, fleet: AgentFleet) -> None:
    await fleet.add_node("n1", 3)
    middle = devices_of(store, "n1")[1]
    fleet.remove_gpu(middle.name)
    await fleet.step()
    fleet.add_gpu("n1")
    await fleet.step()
    assert sorted(d.spec.slot or 0 for d in devices_of(store, "n1")) == [0, 1, 2]


async def test_a_removed_gpus_device_is_deleted(store: MemoryClient, fleet: AgentFleet) -> None:
    await fleet.add_node("n1", 2)
    gone = devices_of(store, "n1")[0]
    fleet.remove_gpu(gone.name)
    await fleet.step()
    assert store.peek(GPUDevice, gone.name) is None


async def test_a_step_with_nothing_changed_writes_nothing(
    store: MemoryClient, fleet: AgentFleet, classify: Any
) -> None:
    await store.create(H100_CLASS)
    await fleet.add_node("n1", 2)
    await classify(H100_CLASS)
    await fleet.step()
    assert await fleet.step() == 0
