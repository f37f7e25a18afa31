"""MemoryClient's label-selected watches keep the API server's semantics.

The API server (its watch cache) decides per change by whether the object matched the
selector before and after it: after only, ADDED; both, MODIFIED; before only, DELETED
with the content it matched with, at the change's resourceVersion; neither, nothing.
tests/controlplane/test_watch_selector.py checks the same on a real API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.types import GPUDevice
from gpu_binder.client.errors import Gone, Invalid
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient

from .builders import device, next_event, vm, with_meta, with_slot

NODE_A = {"gpu.cozystack.io/node": "a"}
NODE_B = {"gpu.cozystack.io/node": "b"}
ON_A = "gpu.cozystack.io/node=a"


async def nothing_more(stream: AsyncIterator[WatchEvent[Any]]) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), timeout=0.05)


def seen(event: WatchEvent[Any]) -> tuple[str, str, dict[str, str]]:
    meta = event.object.metadata
    return event.type, meta.name, dict(meta.labels)


async def test_only_matching_objects_start_a_watch_without_a_version(
    client: MemoryClient,
) -> None:
    await client.create(device("a1", labels=NODE_A))
    await client.create(device("b1", labels=NODE_B))
    await client.create(device("none"))
    stream = client.watch(GPUDevice, label_selector=ON_A)
    assert seen(await next_event(stream)) == ("ADDED", "a1", NODE_A)
    await nothing_more(stream)


async def test_changes_of_matching_objects_arrive_and_the_others_do_not(
    client: MemoryClient,
) -> None:
    stream = client.watch(GPUDevice, resource_version=client.resource_version, label_selector=ON_A)
    a = await client.create(device("a1", labels=NODE_A))
    b = await client.create(device("b1", labels=NODE_B))
    await client.update(with_slot(b, 3))
    await client.update(with_slot(a, 2))
    await client.delete(GPUDevice, "b1")
    await client.delete(GPUDevice, "a1")
    events = [await next_event(stream) for _ in range(3)]
    assert [(e.type, e.object.metadata.name) for e in events] == [
        ("ADDED", "a1"),
        ("MODIFIED", "a1"),
        ("DELETED", "a1"),
    ]
    assert events[1].object.spec.slot == 2
    await nothing_more(stream)


async def test_an_object_relabelled_out_of_the_selection_arrives_as_deleted(
    client: MemoryClient,
) -> None:
    a = await client.create(device("a1", labels=NODE_A))
    stream = client.watch(GPUDevice, resource_version=client.resource_version, label_selector=ON_A)
    moved = await client.update(with_meta(a, labels=NODE_B))
    event = await next_event(stream)
    # The content it matched with, at the resourceVersion of the change that ended it.
    assert seen(event) == ("DELETED", "a1", NODE_A)
    assert event.object.metadata.resource_version == moved.metadata.resource_version
    # Nothing of the stored object changed meanwhile.
    stored = client.peek(GPUDevice, "a1")
    assert stored is not None and stored.metadata.labels == NODE_B
    assert a.metadata.resource_version != moved.metadata.resource_version

    await client.update(with_slot(moved, 5))
    back = await client.update(with_meta(await client.get(GPUDevice, "a1"), labels=NODE_A))
    event = await next_event(stream)
    assert seen(event) == ("ADDED", "a1", NODE_A)
    assert event.object.metadata.resource_version == back.metadata.resource_version
    assert event.object.spec.slot == 5
    await nothing_more(stream)


async def test_a_selected_watch_resumes_from_a_version_with_the_same_rules(
    client: MemoryClient,
) -> None:
    a = await client.create(device("a1", labels=NODE_A))
    since = a.metadata.resource_version
    a = await client.update(with_slot(a, 1))
    b = await client.create(device("b1", labels=NODE_B))
    await client.update(with_meta(b, labels=NODE_A))
    await client.update(with_meta(a, labels={}))
    stream = client.watch(GPUDevice, resource_version=since, label_selector=ON_A)
    events = [seen(await next_event(stream)) for _ in range(3)]
    assert events == [
        ("MODIFIED", "a1", NODE_A),
        ("ADDED", "b1", NODE_A),
        ("DELETED", "a1", NODE_A),
    ]
    await nothing_more(stream)


async def test_set_based_selectors_select_as_in_a_list(client: MemoryClient) -> None:
    stream = client.watch(
        GPUDevice,
        resource_version=client.resource_version,
        label_selector="gpu.cozystack.io/node in (a,b),!cordoned",
    )
    await client.create(device("a1", labels=NODE_A))
    await client.create(device("c1", labels={"gpu.cozystack.io/node": "c"}))
    await client.create(device("b1", labels={**NODE_B, "cordoned": "yes"}))
    await client.create(device("b2", labels=NODE_B))
    assert [(await next_event(stream)).object.metadata.name for _ in range(2)] == ["a1", "b2"]
    await nothing_more(stream)


async def test_namespace_and_selector_narrow_together(client: MemoryClient) -> None:
    await client.create(vm("x", "t1", labels={"team": "ml"}))
    await client.create(vm("y", "t2", labels={"team": "ml"}))
    await client.create(vm("z", "t2", labels={"team": "web"}))
    stream = client.watch(VirtualMachine, "t2", label_selector="team=ml")
    assert (await next_event(stream)).object.metadata.name == "y"
    await nothing_more(stream)


def test_a_malformed_selector_is_refused_at_once(client: MemoryClient) -> None:
    with pytest.raises(Invalid):
        client.watch(GPUDevice, label_selector="a in (b")


async def test_a_selected_watch_from_before_the_history_is_gone() -> None:
    client = MemoryClient(history_limit=2)
    d = await client.create(device("a1", labels=NODE_A))
    since = d.metadata.resource_version
    for slot in range(1, 4):
        d = await client.update(with_slot(d, slot))
    with pytest.raises(Gone):
        await next_event(client.watch(GPUDevice, resource_version=since, label_selector=ON_A))


async def test_closing_a_selected_watch_ends_it(client: MemoryClient) -> None:
    stream = client.watch(GPUDevice, resource_version=client.resource_version, label_selector=ON_A)
    await client.create(device("a1", labels=NODE_A))
    await stream.aclose()  # type: ignore[attr-defined]
    assert [e.type async for e in stream] == ["ADDED"]
