"""A synthetic cluster for benchmarks: 8 GPUs per node, orders of 1, 2, 4 and 8 GPUs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    DeviceMatch,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    device_name,
)
from gpu_binder.binder.deviceindex import slot_resource
from gpu_binder.binder.world import World
from gpu_binder.sim.memory import MemoryClient

RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"
DEVICE_ID = "0x2330"


class Clock:
    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass
class Fixture:
    client: MemoryClient
    world: World
    clock: Clock


def new_fixture(seed: int = 0) -> Fixture:
    clock = Clock()
    client = MemoryClient(clock=clock, seed=seed)
    world = World()
    client.subscribe(lambda _kind, ev: world.apply(ev))
    return Fixture(client, world, clock)


def gpu_class(
    name: str = "h100", resource: str = RESOURCE, device_id: str = DEVICE_ID, **spec: Any
) -> GPUClass:
    return GPUClass(
        metadata=ObjectMeta(name=name),
        spec=GPUClassSpec(
            resource_name=resource,
            match=DeviceMatch(vendor_id="0x10de", device_ids=(device_id,)),
            **spec,
        ),
    )


def node(name: str, slots: list[str], ready: bool = True) -> Node:
    return Node.from_dict(
        {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
                "allocatable": {s: "1" for s in slots},
            },
        }
    )


def device(node_name: str, slot: int, device_id: str = DEVICE_ID, per_node: int = 8) -> GPUDevice:
    pci = f"0000:{0x10 + slot:02x}:00.0"
    return GPUDevice(
        metadata=ObjectMeta(name=device_name(node_name, pci)),
        spec=GPUDeviceSpec(
            node_name=node_name,
            pci_address=pci,
            slot=slot,
            device_id=device_id,
            model="H100",
            numa_node=slot // max(1, per_node // 2),
            driver="vfio-pci",
            iommu_group=slot + 10,
        ),
    )


def vm(
    namespace: str, name: str, gpus: int, running: bool = False, resource: str = RESOURCE
) -> VirtualMachine:
    return VirtualMachine.from_dict(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "running": running,
                "template": {
                    "spec": {
                        "domain": {
                            "devices": {
                                "gpus": [
                                    {"name": f"gpu{i}", "deviceName": resource} for i in range(gpus)
                                ]
                            }
                        }
                    }
                },
            },
        }
    )


def running_vmi(v: VirtualMachine, node_name: str, devices: list[str]) -> VirtualMachineInstance:
    return VirtualMachineInstance.from_dict(
        {
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {
                "name": v.metadata.name,
                "namespace": v.metadata.namespace,
                "annotations": {DEVICES_ANNOTATION: ",".join(sorted(devices))},
                "ownerReferences": [
                    {
                        "apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachine",
                        "name": v.metadata.name,
                        "uid": v.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": v.raw["spec"]["template"]["spec"],
            "status": {"phase": "Running", "nodeName": node_name},
        }
    )


def add_nodes(f: Fixture, nodes: int, per_node: int = 8) -> None:
    for i in range(nodes):
        name = f"node-{i:05d}"
        devs = [device(name, s, per_node=per_node) for s in range(per_node)]
        f.client.put(node(name, [slot_resource(d) for d in devs]))
        for d in devs:
            f.client.put(d)


def add_orders(
    f: Fixture, devices: int, share: float, rng: random.Random, running: bool = False
) -> list[VirtualMachine]:
    """VMs ordering about share × devices GPUs in sizes 1, 2, 4, 8."""
    out = []
    total, i = 0, 0
    while total < devices * share:
        n = rng.choice((1, 1, 2, 2, 4, 8))
        created = f.client.put(vm(f"tenant-{i % 50:02d}", f"vm-{i:06d}", n, running=running))
        out.append(created)
        total += n
        i += 1
    return out
