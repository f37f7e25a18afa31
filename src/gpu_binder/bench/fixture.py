"""A synthetic cluster for benchmarks: 8 GPUs per node, orders of 1, 2, 4 and 8 GPUs."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.api.types import DEVICES_ANNOTATION, GPUClass, GPUDevice
from gpu_binder.cache import World
from gpu_binder.sim import builders
from gpu_binder.sim.binderhost import BinderHost
from gpu_binder.sim.memory import MemoryClient

RESOURCE = builders.H100_RESOURCE
DEVICE_ID = builders.H100_DEVICE_ID
START = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or START

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
    host = BinderHost(clock, seed=seed)
    return Fixture(host.client, host.world, clock)


def gpu_class(
    name: str = "h100", resource: str = RESOURCE, device_id: str = DEVICE_ID, **spec: Any
) -> GPUClass:
    return builders.gpu_class(name, resource, device_id, **spec)


def node(name: str, slots: list[str], ready: bool = True) -> Node:
    return builders.node_object(name, START, ready=ready, allocatable=dict.fromkeys(slots, 1))


def device(node_name: str, slot: int, device_id: str = DEVICE_ID, per_node: int = 8) -> GPUDevice:
    return builders.gpu_device(
        node_name,
        slot,
        device_id,
        model="H100",
        numa_node=slot // max(1, per_node // 2),
        driver="vfio-pci",
        iommu_group=slot + 10,
    )


def vm(
    namespace: str, name: str, gpus: int, running: bool = False, resource: str = RESOURCE
) -> VirtualMachine:
    return builders.vm_object(name, namespace, [resource] * gpus, running=running)


def running_vmi(v: VirtualMachine, node_name: str, devices: list[str]) -> VirtualMachineInstance:
    raw = builders.vmi_for(
        v,
        annotations={DEVICES_ANNOTATION: ",".join(sorted(devices))},
        status={"phase": "Running", "nodeName": node_name},
    )
    return VirtualMachineInstance.from_dict(raw)


def add_nodes(f: Fixture, nodes: int, per_node: int = 8) -> None:
    for i in range(nodes):
        name = f"node-{i:05d}"
        devs = [device(name, s, per_node=per_node) for s in range(per_node)]
        f.client.put(node(name, [builders.slot_resource(s) for s in range(per_node)]))
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
