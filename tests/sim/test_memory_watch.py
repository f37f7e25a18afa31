"""MemoryClient's watches, subscriptions and injected conflicts."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDevice, Phase
from gpu_binder.client.errors import Conflict, Gone
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient

from .builders import (
    T0,
    device,
    next_event,
    vm,
    with_meta,
    with_phase,
    with_slot,
)

# --- watch --------------------------------------------------------------------------------


async def test_watch_from_a_version_replays_the_events_after_it(client: MemoryClient) -> None:
    d = await client.create(device())
    since = d.metadata.resource_version
    await client.update(with_slot(d, 1))
    await client.delete(GPUDevice, d.metadata.name)
    stream = client.watch(GPUDevice, resource_version=since)
    types = [(await next_event(stream)).type for _ in range(2)]
    assert types == ["MODIFIED", "DELETED"]


async def test_watch_without_a_version_starts_with_the_current_objects(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    await client.update(with_slot(d, 1))
    event = await next_event(client.watch(GPUDevice))
    assert (event.type, event.object.spec.slot) == ("ADDED", 1)


async def test_watch_delivers_writes_made_after_it_started(client: MemoryClient) -> None:
    stream = client.watch(GPUDevice, resource_version=client.resource_version)
    await client.create(device())
    assert (await next_event(stream)).type == "ADDED"


async def test_watch_of_one_namespace_leaves_out_the_others(client: MemoryClient) -> None:
    stream = client.watch(VirtualMachine, "t2", resource_version=client.resource_version)
    await client.create(vm("a", "t1"))
    await client.create(vm("b", "t2"))
    assert (await next_event(stream)).object.metadata.name == "b"


async def test_watch_from_before_the_history_is_gone() -> None:
    client = MemoryClient(history_limit=3)
    d = await client.create(device())
    since = d.metadata.resource_version
    for slot in range(1, 5):
        d = await client.update(with_slot(d, slot))
    with pytest.raises(Gone):
        await next_event(client.watch(GPUDevice, resource_version=since))


async def test_a_watch_reader_falling_behind_the_history_gets_gone() -> None:
    client = MemoryClient(history_limit=2)
    stream = client.watch(GPUDevice, resource_version=client.resource_version)
    d = await client.create(device())
    for slot in range(1, 4):
        d = await client.update(with_slot(d, slot))
    with pytest.raises(Gone):
        await next_event(stream)


async def test_dropped_watches_end_after_their_queued_events(client: MemoryClient) -> None:
    stream = client.watch(GPUDevice, resource_version=client.resource_version)
    await client.create(device())
    client.drop_watches()
    assert [e.type async for e in stream] == ["ADDED"]


# --- subscription -------------------------------------------------------------------------


async def test_subscribers_see_every_change_in_write_order(client: MemoryClient) -> None:
    seen: list[tuple[str, str]] = []
    client.subscribe(lambda kind, event: seen.append((kind.__name__, event.type)))
    d = await client.create(device())
    await client.create(vm())
    await client.update(with_slot(d, 1))
    await client.delete(GPUDevice, d.metadata.name)
    assert seen == [
        ("GPUDevice", "ADDED"),
        ("VirtualMachine", "ADDED"),
        ("GPUDevice", "MODIFIED"),
        ("GPUDevice", "DELETED"),
    ]


async def test_a_write_made_by_a_subscriber_reaches_everyone_after_the_current_event(
    client: MemoryClient,
) -> None:
    seen: list[str] = []

    def label_new_devices(kind: type[Any], event: WatchEvent[Any]) -> None:
        if event.type == "ADDED" and kind is GPUDevice:
            client.put(with_meta(event.object, labels={"seen": "yes"}))

    client.subscribe(label_new_devices)
    client.subscribe(lambda kind, event: seen.append(event.type))
    await client.create(device())
    assert seen == ["ADDED", "MODIFIED"]


async def test_unsubscribed_callbacks_are_not_called(client: MemoryClient) -> None:
    seen: list[str] = []
    unsubscribe = client.subscribe(lambda kind, event: seen.append(event.type))
    unsubscribe()
    await client.create(device())
    assert seen == []


# --- injected conflicts -------------------------------------------------------------------


async def test_an_injected_conflict_fails_the_write_as_if_another_writer_won(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    client.inject_conflicts(lambda kind, obj: kind == "GPUDevice")
    with pytest.raises(Conflict):
        await client.update_status(with_phase(d, Phase.BOUND))
    stored = client.peek(GPUDevice, d.metadata.name)
    assert stored is not None and stored.metadata.resource_version != d.metadata.resource_version
    assert stored.status.phase is None


async def test_conflict_next_write_fails_one_write_only(client: MemoryClient) -> None:
    d = await client.create(device())
    client.conflict_next_write(GPUDevice, d.metadata.name)
    with pytest.raises(Conflict):
        await client.update(with_slot(d, 1))
    fresh = await client.get(GPUDevice, d.metadata.name)
    assert (await client.update(with_slot(fresh, 1))).spec.slot == 1


async def test_put_stores_the_object_with_its_status(client: MemoryClient) -> None:
    stored = client.put(with_phase(device(), Phase.ATTACHED))
    assert (stored.status.phase, stored.metadata.generation) == (Phase.ATTACHED, 1)


async def test_events_expire_after_the_event_ttl() -> None:
    now = [T0]
    client = MemoryClient(clock=lambda: now[0], event_ttl=3600)

    def event(name: str) -> Event:
        return Event(
            metadata=ObjectMeta(name=name, namespace="t"), regarding={}, reason="", note=""
        )

    await client.create(event("old"))
    now[0] = T0 + timedelta(hours=1)
    await client.create(event("new"))
    assert [e.metadata.name for e in client.objects(Event)] == ["new"]
