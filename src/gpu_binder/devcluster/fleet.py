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

import yaml

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    FINALIZER,
    DeviceMatch,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    PlacementSpec,
    device_name,
)
from gpu_binder.client.errors import AlreadyExists
from gpu_binder.kube.client import KubeClient

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
CRDS = (DEPLOY / "crds", DEPLOY / "kubevirt" / "crds.yaml")
RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"
DEVICE_ID = "0x2330"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def gpu_class(
    name: str = "h100", resource: str = RESOURCE, device_id: str = DEVICE_ID, **spec: Any
) -> GPUClass:
    spec.setdefault("placement", PlacementSpec(policy="Pack"))
    return GPUClass(
        metadata=ObjectMeta(name=name),
        spec=GPUClassSpec(
            resource_name=resource,
            match=DeviceMatch(vendor_id="0x10de", device_ids=(device_id,)),
            **spec,
        ),
    )


def slot_resource(slot: int, device_id: str = DEVICE_ID) -> str:
    return f"gpu.cozystack.io/10de-{device_id.removeprefix('0x')}-s{slot}"


def node_status(gpus: int, ready: bool = True, device_id: str = DEVICE_ID) -> dict[str, Any]:
    """A kubelet's report: Ready (or not) since now, and one unit of each slot resource."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    slots = {slot_resource(i, device_id): "1" for i in range(gpus)}
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                "lastTransitionTime": now,
                "lastHeartbeatTime": now,
            }
        ],
        "allocatable": slots,
        "capacity": slots,
    }


async def create_node(
    client: KubeClient, name: str, gpus: int, device_id: str = DEVICE_ID
) -> list[Awaitable[Any]]:
    """Create the Node and its status; the GPUDevice creations are returned to be awaited."""
    raw = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
    await _ignore_exists(client.create(Node.from_dict(raw)))
    await client.patch_status(Node, name, "", {"status": node_status(gpus, device_id=device_id)})
    return [_ignore_exists(client.create(device(name, i, device_id))) for i in range(gpus)]


def device(node: str, slot: int, device_id: str = DEVICE_ID) -> GPUDevice:
    spec = GPUDeviceSpec(
        node_name=node,
        pci_address=f"0000:{0x18 + slot:02x}:00.0",
        slot=slot,
        vendor_id="0x10de",
        device_id=device_id,
        model="simulated GPU",
        numa_node=slot * 2 // 8,
        driver="vfio-pci",
    )
    meta = ObjectMeta(name=device_name(node, spec.pci_address), finalizers=(FINALIZER,))
    return GPUDevice(metadata=meta, spec=spec)


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
    entries = [{"name": f"gpu{i}", "deviceName": resource} for i in range(gpus)]
    return VirtualMachine.from_dict(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "runStrategy": "Always",
                "template": {"spec": {"domain": {"devices": {"gpus": entries}}}},
            },
        }
    )


def vmi(
    owner: VirtualMachine | None, namespace: str, name: str, gpus: int, resource: str = RESOURCE
) -> VirtualMachineInstance:
    """The VMI KubeVirt would create for owner, or a standalone one (its own order)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine",
                "name": owner.metadata.name,
                "uid": owner.metadata.uid,
                "controller": True,
            }
        ]
    entries = [{"name": f"gpu{i}", "deviceName": resource} for i in range(gpus)]
    return VirtualMachineInstance.from_dict(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": meta,
            "spec": {"domain": {"devices": {"gpus": entries}}},
        }
    )


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    """deploy/binder/webhook.yaml, calling url (outside a cluster) with this CA."""
    config: dict[str, Any] = yaml.safe_load((DEPLOY / "binder" / "webhook.yaml").read_text())
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
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
