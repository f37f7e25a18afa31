"""Informers on a real API server: a forced watch expiry is recovered by relist and diff."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from realcluster import Fleet, eventually

from gpu_binder.api.types import GPUDevice
from gpu_binder.client.interface import WatchEvent
from gpu_binder.kube import KubeClient
from gpu_binder.kube.cache import Informer

pytestmark = pytest.mark.controlplane


async def test_a_forced_watch_expiry_relists_and_misses_no_deletion(admin: KubeClient) -> None:
    fleet = Fleet(admin, gpus_per_node=2)
    await fleet.create_node("a")
    gone, stays = sorted(d.metadata.name for d in await fleet.devices())
    seen: list[WatchEvent[Any]] = []
    informer: Informer[GPUDevice] = Informer(admin, GPUDevice, seen.append)
    task = asyncio.create_task(informer.run())
    await eventually(lambda: _has(informer, gone, stays), what="synced")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    # While the informer is away, one device goes (finalizer first) and one arrives.
    await admin.patch(GPUDevice, gone, "", {"metadata": {"finalizers": None}})
    await admin.delete(GPUDevice, gone)
    await fleet.create_node("b")
    # ... and it comes back with a version the API server no longer keeps (a real 410).
    informer.resource_version = "1"
    seen.clear()
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: _deleted(seen, gone), what="a DELETED event for the vanished")
        await eventually(lambda: _added_on(seen, f"n-{fleet.id}-b"), what="the new node's GPUs")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert informer.relists == 1
    assert gone not in informer.store and stays in informer.store


async def test_an_informer_resumes_its_watch_without_replaying(admin: KubeClient) -> None:
    fleet = Fleet(admin, gpus_per_node=1)
    await fleet.create_node("a")
    seen: list[WatchEvent[Any]] = []
    informer: Informer[GPUDevice] = Informer(admin, GPUDevice, seen.append)
    await informer.relist()
    (device,) = await fleet.devices()
    seen.clear()

    await admin.patch(GPUDevice, device.metadata.name, "", {"metadata": {"labels": {"x": "1"}}})
    async with asyncio.timeout(10):
        while not seen:
            watch = asyncio.create_task(informer.watch())
            await asyncio.sleep(0.5)
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    assert [(e.type, e.object.metadata.name) for e in seen] == [("MODIFIED", device.metadata.name)]
    assert informer.store[device.metadata.name].metadata.labels == {"x": "1"}
    assert informer.relists == 0


async def _has(informer: Informer[GPUDevice], *names: str) -> bool:
    return informer.synced.is_set() and all(n in informer.store for n in names)


async def _deleted(seen: list[WatchEvent[Any]], name: str) -> bool:
    return any(e.type == "DELETED" and e.object.metadata.name == name for e in seen)


async def _added_on(seen: list[WatchEvent[Any]], node: str) -> bool:
    return any(e.type == "ADDED" and e.object.spec.node_name == node for e in seen)
