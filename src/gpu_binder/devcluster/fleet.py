"""Simulated GPU nodes on a real API server: Node objects serving slot resources, their
GPUDevices as the node agent would create them, and the KubeVirt objects that use them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import GPUClass, GPUDevice, PlacementSpec
from gpu_binder.client.errors import AlreadyExists
from gpu_binder.kube.client import KubeClient
from gpu_binder.sim import builders

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
CRDS = (DEPLOY / "crds", DEPLOY / "kubevirt" / "crds.yaml")
RESOURCE = builders.H100_RESOURCE
DEVICE_ID = builders.H100_DEVICE_ID
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
# The bus of slot 0 on a simulated node, as the names in README's example show.
FIRST_BUS = 0x18


def gpu_class(
    name: str = "h100", resource: str = RESOURCE, device_id: str = DEVICE_ID, **spec: Any
) -> GPUClass:
    spec.setdefault("placement", PlacementSpec(policy="Pack"))
    return builders.gpu_class(name, resource, device_id, **spec)


def node_status(gpus: int, ready: bool = True, device_id: str = DEVICE_ID) -> dict[str, Any]:
    """A kubelet's report: Ready (or not) since now, and one unit of each slot resource."""
    slots = {builders.slot_resource(i, device_id): 1 for i in range(gpus)}
    now = datetime.now(UTC).replace(microsecond=0)
    return builders.node_status(now, slots, ready=ready, heartbeat=True, capacity=True)


async def create_node(
    client: KubeClient,
    name: str,
    gpus: int,
    device_id: str = DEVICE_ID,
    *,
    ready: bool = True,
    **device: Any,
) -> list[Awaitable[Any]]:
    """Create the Node and its status; the GPUDevice creations are returned to be awaited.

    device replaces fields of a simulated node's GPUDevices (see gpu_device)."""
    await _ignore_exists(client.create(Node.from_dict({"metadata": builders.node_metadata(name)})))
    status = node_status(gpus, ready, device_id)
    await client.patch_status(Node, name, "", {"status": status})
    return [
        _ignore_exists(client.create(gpu_device(name, i, device_id, **device))) for i in range(gpus)
    ]


def gpu_device(node: str, slot: int, device_id: str = DEVICE_ID, **spec: Any) -> GPUDevice:
    """A simulated node's GPU, as its agent would create it (spec overrides the defaults)."""
    defaults = {
        "first_bus": FIRST_BUS,
        "model": "simulated GPU",
        "numa_node": slot * 2 // 8,
        "driver": "vfio-pci",
    }
    return builders.gpu_device(node, slot, device_id, finalizer=True, **{**defaults, **spec})


async def seed(
    client: KubeClient,
    nodes: Iterable[str],
    gpus_per_node: int = 8,
    device_id: str = DEVICE_ID,
    concurrency: int = 16,
) -> int:
    """Create simulated GPU nodes and their devices, `concurrency` requests at a time."""
    limit = asyncio.Semaphore(concurrency)

    async def bounded(call: Awaitable[Any]) -> None:
        async with limit:
            await call

    async def one(name: str) -> int:
        async with limit:
            devices = await create_node(client, name, gpus_per_node, device_id)
        await asyncio.gather(*(bounded(d) for d in devices))
        return len(devices)

    return sum(await asyncio.gather(*(one(n) for n in nodes)))


def vm(namespace: str, name: str, gpus: int, resource: str = RESOURCE) -> VirtualMachine:
    return builders.vm_object(name, namespace, [resource] * gpus, run_strategy="Always")


def vmi(
    owner: VirtualMachine | None, namespace: str, name: str, gpus: int, resource: str = RESOURCE
) -> VirtualMachineInstance:
    """The VMI KubeVirt would create for owner, or a standalone one (its own order)."""
    raw = builders.vmi_object(name, namespace, [resource] * gpus, owner=owner)
    return VirtualMachineInstance.from_dict(raw)


def webhook_configuration(base_url: str, ca_pem: bytes) -> dict[str, Any]:
    """deploy/binder/webhook.yaml, each webhook calling its own path under base_url (a
    server outside the cluster, https://host:port) with this CA.

    A base_url with a path is refused: each webhook's path is appended to it, and a base of
    https://host:port/mutate called /mutate/mutate, which the server answers 404, so the
    API server refused every GPU VMI ("could not find the requested resource")."""
    if urlsplit(base_url).path.strip("/"):
        raise ValueError(
            f"webhook base URL {base_url!r} has a path: give https://host:port, each "
            "webhook's own path (/mutate, /mutate-pods) is appended to it"
        )
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "binder" / "webhook.yaml").read_text())
    ca = base64.b64encode(ca_pem).decode()
    for hook in config["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"{base_url.rstrip('/')}{path}", "caBundle": ca}
    return config


async def put_webhook_configuration(client: KubeClient, config: dict[str, Any]) -> None:
    name = config["metadata"]["name"]
    try:
        await client.request("POST", WEBHOOKS, config)
    except AlreadyExists:
        current = await client.request("GET", f"{WEBHOOKS}/{name}")
        config["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await client.request("PUT", f"{WEBHOOKS}/{name}", config)


async def _ignore_exists(call: Awaitable[Any]) -> None:
    with contextlib.suppress(AlreadyExists):
        await call
