"""A binder that runs for months keeps nothing per VM it ever saw: a VM gone with its VMI
and its set leaves no parsed order and no set generation behind, a step's verdicts of
keys that are gone are dropped once they could outnumber the live ones, and the Event
writer keeps no note it wrote (`gpu-binder bench soak` found each growing per VM)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from binder.cluster import NAMESPACE, Cluster
from binder.test_placement_indexes import device
from gpu_binder.binder import ClientRecorder, Note
from gpu_binder.binder.verdicts import Verdicts
from gpu_binder.cache import World
from gpu_binder.client.interface import Client, WatchEvent


async def lived_and_gone(cluster: Cluster) -> str:
    cluster.gpu_class()
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle()
    cluster.start("vm")
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2
    await cluster.stop("vm")
    await cluster.delete_vm("vm")
    await cluster.settle_after(minutes=10)
    assert cluster.set_of("vm") == []
    return f"{NAMESPACE}/vm"


async def test_a_vm_gone_with_its_set_leaves_no_set_generation(cluster: Cluster) -> None:
    key = await lived_and_gone(cluster)
    assert key not in cluster.world.devices.key_gen


def test_a_set_released_by_the_binders_own_write_after_its_vm_went_leaves_no_generation() -> None:
    world = World()
    world.apply(WatchEvent("ADDED", device("node-a", 0, "vm")))
    assert "t/vm" in world.devices.key_gen
    world.put_device(device("node-a", 0, None))  # the release's write-through, VM gone
    assert "t/vm" not in world.devices.key_gen


async def test_a_vm_gone_leaves_no_parsed_order(cluster: Cluster) -> None:
    key = await lived_and_gone(cluster)
    assert cluster.world.order_of(key) == {}
    assert key not in cluster.world._orders


def test_verdicts_of_gone_keys_go_once_they_outnumber_the_live_twice_over() -> None:
    clean = Verdicts()
    for i in range(200):
        clean[f"ns/gone-{i}"] = "clean"
    clean["ns/live"] = "clean"
    clean.pending({"ns/live"})
    assert list(clean) == ["ns/live"]


def test_verdicts_of_gone_keys_stay_while_few() -> None:
    clean = Verdicts()
    clean["ns/gone"] = clean["ns/live"] = "clean"
    clean.pending({"ns/live"})
    assert set(clean) == {"ns/gone", "ns/live"}


class EventSink:
    async def create(self, obj: Any) -> Any:
        return obj


async def test_the_event_writer_keeps_no_note_it_wrote() -> None:
    recorder = ClientRecorder(cast(Client, EventSink()))
    note = Note("VirtualMachine", NAMESPACE, "vm", "uid-1", "GPUOrder", "bound")
    await recorder.record(note, datetime(2026, 12, 2, tzinfo=UTC))
    assert not any(isinstance(v, list) and note in v for v in vars(recorder).values())
