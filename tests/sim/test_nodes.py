"""Node objects: Ready with its transition time, cordon, and device-plugin allocatable."""

from __future__ import annotations

from gpu_binder.api.kubevirt import Node
from gpu_binder.sim.builders import HOSTNAME_LABEL
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import VIRT_HANDLER_UNITS, cordon, create_node, set_allocatable, set_ready


async def test_a_new_node_is_ready_since_its_creation(
    store: MemoryClient, clock: VirtualClock
) -> None:
    node = await create_node(store, "n1", clock.now())
    assert (node.ready, node.ready_since, node.unschedulable) == (True, clock.now(), False)


async def test_a_node_carries_its_hostname_label(store: MemoryClient, clock: VirtualClock) -> None:
    node = await create_node(store, "n1", clock.now(), {"zone": "a"})
    assert node.metadata.labels == {
        HOSTNAME_LABEL: "n1",
        "zone": "a",
        "kubevirt.io/schedulable": "true",
    }


async def test_readiness_keeps_its_transition_time_while_unchanged(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n1", clock.now())
    clock.advance(10)
    await set_ready(store, "n1", False, clock.now())
    lost_at = clock.now()
    clock.advance(10)
    await set_ready(store, "n1", False, clock.now())
    node = store.peek(Node, "n1")
    assert node is not None and (node.ready, node.ready_since) == (False, lost_at)


async def test_cordon_sets_spec_unschedulable_and_uncordon_clears_it(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n1", clock.now())
    cordoned = await cordon(store, "n1")
    uncordoned = await cordon(store, "n1", False)
    assert cordoned is not None and cordoned.unschedulable
    assert uncordoned is not None and not uncordoned.unschedulable


VIRT_HANDLER_QUANTITIES = {k: str(v) for k, v in VIRT_HANDLER_UNITS.items()}


async def test_allocatable_is_written_as_quantities(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n1", clock.now())
    node = await set_allocatable(store, "n1", {"nvidia.com/H100": 2})
    assert node is not None and node.raw["status"]["allocatable"] == {
        **VIRT_HANDLER_QUANTITIES,
        "nvidia.com/H100": "2",
    }


async def test_unchanged_allocatable_is_not_written(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n1", clock.now())
    await set_allocatable(store, "n1", {"r": 1})
    assert await set_allocatable(store, "n1", {"r": 1}) is None


async def test_device_units_leave_the_nodes_cpu_and_memory_alone(
    store: MemoryClient, clock: VirtualClock
) -> None:
    await create_node(store, "n1", clock.now())
    await set_allocatable(store, "n1", {"cpu": 64, "memory": 128})
    node = await set_allocatable(store, "n1", {"nvidia.com/H100": 2})
    assert node is not None
    assert node.raw["status"]["allocatable"] == {
        **VIRT_HANDLER_QUANTITIES,
        "cpu": "64",
        "memory": "128",
        "nvidia.com/H100": "2",
    }
