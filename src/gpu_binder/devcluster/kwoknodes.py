"""GPU nodes simulated by KWOK on a real API server: Node objects KWOK keeps alive, whose
allocatable carries one unit of each slot resource as the agent's device plugin would
serve them, and their GPUDevices as the agent would create them.

``class_resource`` also puts the class's own resource on the node, N units, as a
count-based device plugin would: the baseline of ``gpu-binder bench start`` asks for that.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Iterable
from typing import Any

from gpu_binder.client.errors import AlreadyExists
from gpu_binder.devcluster import fleet
from gpu_binder.envtest.kwok import kwok_node
from gpu_binder.kube.client import KubeClient
from gpu_binder.sim import builders
from gpu_binder.sim.launcher import VIRTUALIZATION_DEVICES

# KubeVirt's launcher pods select nodes virt-handler has labelled schedulable.
SCHEDULABLE = "kubevirt.io/schedulable"
MERGE_PATCH = "application/merge-patch+json"
# What a KWOK node offers besides its GPUs: enough for any launcher pod's requests, and
# the devices virt-handler's own plugins serve on every KubeVirt node, 1000 units each
# (`pkg/virt-handler/device-manager/device_controller.go` `PermanentHostDevicePlugins`,
# `cmd/virt-handler/virt-handler.go` maxDevices), which every launcher pod asks one of.
NODE_RESOURCES = {
    "cpu": "128",
    "memory": "1Ti",
    "pods": "250",
    **dict.fromkeys(VIRTUALIZATION_DEVICES, "1k"),
}


def slot_allocatable(gpus: int, device_id: str) -> dict[str, str]:
    return {builders.slot_resource(i, device_id): "1" for i in range(gpus)}


async def create_kwok_node(
    client: KubeClient,
    name: str,
    gpus: int,
    device_id: str = fleet.DEVICE_ID,
    *,
    class_resource: str | None = None,
) -> list[Awaitable[Any]]:
    """Create the Node and write its status; the GPUDevice creations are returned."""
    allocatable: dict[str, str | int] = {**NODE_RESOURCES, **slot_allocatable(gpus, device_id)}
    if class_resource:
        allocatable[class_resource] = gpus
    node, status = kwok_node(name, allocatable, labels={SCHEDULABLE: "true"})
    with contextlib.suppress(AlreadyExists):
        await client.request("POST", "/api/v1/nodes", node)
    await client.request("PATCH", f"/api/v1/nodes/{name}/status", status, content_type=MERGE_PATCH)
    return [
        _ignore_exists(client.create(fleet.gpu_device(name, i, device_id))) for i in range(gpus)
    ]


async def seed_kwok(
    client: KubeClient,
    names: Iterable[str],
    gpus: int = 8,
    device_id: str = fleet.DEVICE_ID,
    *,
    class_resource: str | None = None,
    concurrency: int = 16,
) -> int:
    """Create KWOK GPU nodes and their devices, concurrency requests at a time."""
    limit = asyncio.Semaphore(concurrency)

    async def bounded(call: Awaitable[Any]) -> None:
        async with limit:
            await call

    async def one(name: str) -> int:
        async with limit:
            devices = await create_kwok_node(
                client, name, gpus, device_id, class_resource=class_resource
            )
        await asyncio.gather(*(bounded(d) for d in devices))
        return len(devices)

    return sum(await asyncio.gather(*(one(n) for n in names)))


async def _ignore_exists(call: Awaitable[Any]) -> None:
    with contextlib.suppress(AlreadyExists):
        await call
