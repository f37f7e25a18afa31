"""Label-selected watches on a real API server, and the in-memory store against them.

One scenario of creates, updates, relabels and deletes runs on both clients; the events a
selected watch delivers must be the same: an object relabelled into the selection is
ADDED, out of it DELETED (with the labels it matched with), others' changes are unseen.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from realcluster import uid

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDevice, GPUDeviceSpec
from gpu_binder.client.interface import Client, WatchEvent
from gpu_binder.kube import KubeClient
from gpu_binder.sim.memory import MemoryClient

pytestmark = pytest.mark.controlplane

LABEL = "gpu.cozystack.io/node"
Seen = tuple[str, str, str]


def gpu(name: str, node: str, slot: int = 0) -> GPUDevice:
    return GPUDevice(
        metadata=ObjectMeta(name=name, labels={LABEL: node}),
        spec=GPUDeviceSpec(
            node_name="n", pci_address="0000:3b:00.0", device_id="0x2330", slot=slot
        ),
    )


def relabelled(d: GPUDevice, node: str) -> GPUDevice:
    return d.model_copy(
        update={"metadata": d.metadata.model_copy(update={"labels": {LABEL: node}})}
    )


def with_slot(d: GPUDevice, slot: int) -> GPUDevice:
    return d.model_copy(update={"spec": d.spec.model_copy(update={"slot": slot})})


async def scenario(client: Client, prefix: str) -> list[Seen]:
    """What a watch of `LABEL=<prefix>-here` sees: (type, name, label) without the prefix."""
    here, there = f"{prefix}-here", f"{prefix}-there"
    a = await client.create(gpu(f"{prefix}-a", here))
    b = await client.create(gpu(f"{prefix}-b", there))
    listed = await client.list(GPUDevice, label_selector=f"{LABEL}={here}")
    assert [d.metadata.name for d in listed.items] == [a.metadata.name]
    stream = client.watch(
        GPUDevice, resource_version=listed.resource_version, label_selector=f"{LABEL}={here}"
    )
    write = client.update
    a = await write(with_slot(a, 1))  # MODIFIED
    a = await write(relabelled(a, there))  # DELETED: leaves the selection
    b = await write(with_slot(b, 2))  # unseen
    b = await write(relabelled(b, here))  # ADDED: enters it
    a = await write(with_slot(a, 3))  # unseen
    await client.delete(GPUDevice, a.metadata.name)  # unseen
    await client.delete(GPUDevice, b.metadata.name)  # DELETED
    seen: list[Seen] = []
    try:
        async with asyncio.timeout(10):
            async for event in stream:
                if event.type == "BOOKMARK":
                    continue
                seen.append(_seen(event, prefix))
                if event.type == "DELETED" and event.object.metadata.name == b.metadata.name:
                    break
        # Nothing else for the selection: the last two changes of `a` stay unseen.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                async for event in stream:
                    if event.type != "BOOKMARK":
                        seen.append(_seen(event, prefix))
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return seen


def _seen(event: WatchEvent[Any], prefix: str) -> Seen:
    meta = event.object.metadata
    label = meta.labels.get(LABEL, "")
    return event.type, meta.name.removeprefix(prefix), label.removeprefix(prefix)


async def test_a_selected_watch_sees_objects_enter_and_leave_the_selection(
    admin: KubeClient,
) -> None:
    expected = [
        ("MODIFIED", "-a", "-here"),
        ("DELETED", "-a", "-here"),
        ("ADDED", "-b", "-here"),
        ("DELETED", "-b", "-here"),
    ]
    assert await scenario(admin, f"sel-{uid()}") == expected
    assert await scenario(MemoryClient(), f"sel-{uid()}") == expected


async def test_a_relabel_out_of_the_selection_is_deleted_at_that_writes_version(
    admin: KubeClient,
) -> None:
    for client in (admin, MemoryClient()):
        here = f"sel-{uid()}"
        d = await client.create(gpu(f"{here}-a", here))
        stream = client.watch(
            GPUDevice,
            resource_version=d.metadata.resource_version,
            label_selector=f"{LABEL}={here}",
        )
        moved = await client.update(relabelled(d, "elsewhere"))
        try:
            async with asyncio.timeout(10):
                event = await anext(e async for e in stream if e.type != "BOOKMARK")
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        assert (event.type, event.object.metadata.labels) == ("DELETED", {LABEL: here}), client
        assert event.object.metadata.resource_version == moved.metadata.resource_version, client
        await client.delete(GPUDevice, d.metadata.name)
