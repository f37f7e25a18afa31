"""The scheduler binds pods to nodes by their filters, extended-resource capacity among them."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.pod import Pod
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.launcher import name_pod, render_launcher_pod
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.nodes import cordon, create_node, set_allocatable, set_ready
from gpu_binder.sim.retry import modify, wire
from gpu_binder.sim.scheduler import Scheduler

from .kubevirt_world import SLOT0, pin


@pytest.fixture
def scheduler(store: MemoryClient, clock: VirtualClock) -> Scheduler:
    return Scheduler(store, clock.now)


async def nodes(store: MemoryClient, clock: VirtualClock, *names: str, **units: int) -> None:
    for n in names:
        await create_node(store, n, clock.now())
        await set_allocatable(store, n, units or {SLOT0: 1})


def vmi(name: str, *resources: str, **spec: Any) -> dict[str, Any]:
    gpus = [{"name": f"g{i}", "deviceName": r} for i, r in enumerate(resources)]
    return {
        "metadata": {"name": name, "namespace": "t", "uid": f"uid-{name}"},
        "spec": {"domain": {"devices": {"gpus": gpus}}, **spec},
    }


async def pod_for(store: MemoryClient, raw: dict[str, Any]) -> Pod:
    return await store.create(Pod.from_dict(name_pod(render_launcher_pod(raw), random.Random(0))))


def node_of(store: MemoryClient, pod: Pod) -> str:
    found = store.peek(Pod, pod.metadata.name, "t")
    return found.node_name if found is not None else "gone"


async def test_a_pod_is_bound_to_the_node_its_affinity_allows(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1", "n2", "n3")
    pod = await pod_for(store, pin(vmi("a", SLOT0), "n2"))
    await scheduler.step()
    assert node_of(store, pod) == "n2"


async def test_a_cordoned_or_unready_node_takes_no_pod(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1", "n2", "n3")
    await cordon(store, "n1")
    await set_ready(store, "n2", False, clock.now())
    pod = await pod_for(store, vmi("a", SLOT0))
    await scheduler.step()
    assert node_of(store, pod) == "n3"


async def test_a_node_without_kubevirts_schedulable_label_takes_no_launcher_pod(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1")

    def unlabel(node: Node) -> Node:
        raw = wire(node)
        raw["metadata"]["labels"].pop("kubevirt.io/schedulable")
        return Node.from_dict(raw)

    await modify(store, Node, "n1", "", unlabel)
    pod = await pod_for(store, vmi("a", SLOT0))
    await scheduler.step()
    assert node_of(store, pod) == ""


async def test_a_slot_held_by_a_bound_pod_sends_the_next_to_another_node(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1", "n2")
    first = await pod_for(store, vmi("a", SLOT0))
    await scheduler.step()
    second = await pod_for(store, vmi("b", SLOT0))
    await scheduler.step()
    assert {node_of(store, first), node_of(store, second)} == {"n1", "n2"}


async def test_a_pod_whose_units_no_node_has_free_waits_until_they_are_freed(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1")
    first = await pod_for(store, vmi("a", SLOT0))
    await scheduler.step()
    second = await pod_for(store, vmi("b", SLOT0))
    await scheduler.step()
    waited = node_of(store, second)
    await store.delete(Pod, first.metadata.name, "t", grace_period_seconds=0)
    await scheduler.step()
    assert (waited, node_of(store, second)) == ("", "n1")
    assert second.key in scheduler.waited


async def test_a_pod_waits_for_a_node_that_serves_its_slot(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1", **{"nvidia.com/H100": 1})
    pod = await pod_for(store, vmi("a", SLOT0))
    await scheduler.step()
    waited = node_of(store, pod)
    await set_allocatable(store, "n1", {SLOT0: 1})
    await scheduler.step()
    assert (waited, node_of(store, pod)) == ("", "n1")


async def test_the_node_with_fewest_pods_is_chosen(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1", "n2", **{"nvidia.com/H100": 4})
    placed = []
    for name in "abc":
        placed.append(await pod_for(store, vmi(name, "nvidia.com/H100")))
        await scheduler.step()
    assert sorted(node_of(store, p) for p in placed) == ["n1", "n1", "n2"]


async def test_a_pod_being_deleted_before_it_got_a_node_is_not_scheduled(
    store: MemoryClient, clock: VirtualClock, scheduler: Scheduler
) -> None:
    await nodes(store, clock, "n1")
    pod = await pod_for(store, vmi("a", SLOT0))
    await store.delete(Pod, pod.metadata.name, "t")
    await scheduler.step()
    assert node_of(store, pod) == "gone"
