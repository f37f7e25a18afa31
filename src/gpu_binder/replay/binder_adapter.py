"""The binder itself placing the replay's orders: `binder` in the replay's table IS the product.

The trace's cluster is built as the binder sees a real one — Node objects with their
allocatable CPU and memory, one GPUClass per GPU model, one classified GPUDevice per GPU —
in a `World`, and every order is a KubeVirt VirtualMachine: `num_gpu` GPU entries naming
a class's resourceName, its CPU and memory as domain resource requests, and the models
of its `gpu_spec` (every model when empty) in the `gpu.cozystack.io/classes` annotation.
An arrival is decided by `binder.Placer.complete`, the completion the orders step
makes for each order (class policy, options, CPU and memory fit, binding), and an order
that fits nowhere goes through the defragmentation step's room-making first
(`Placer.make_room`). A departure releases the set as the sets step does for a deleted VM.

No API server sits in between (the binder's writes go straight into its world, as the
write-through cache does with their responses), which keeps a replay of 10 seeds of
6,212 GPUs within minutes; the decisions are the binder's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from gpu_binder.api.kubevirt import Node as KubeNode
from gpu_binder.api.kubevirt import VirtualMachine
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    CLASSES_ANNOTATION,
    FINALIZER,
    DeviceMatch,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    GPUDeviceStatus,
    Phase,
    device_name,
)
from gpu_binder.binder import Config, Placer
from gpu_binder.cache.world import World
from gpu_binder.client.interface import WatchEvent
from gpu_binder.replay.order import DemandKey, Order
from gpu_binder.replay.policy import Run, RunFactory
from gpu_binder.replay.trace import Node

NAMESPACE = "replay"
T0 = datetime(2023, 1, 1, tzinfo=UTC)


def class_name(model: str) -> str:
    """A GPU model as a Kubernetes object name: V100M16 → v100m16."""
    return re.sub(r"[^a-z0-9-]+", "-", model.lower()).strip("-") or "gpu"


def resource_name(model: str) -> str:
    return f"nvidia.com/{model}"


class BinderRun:
    """The binder's world for one seed's cluster, placing orders as the binder does."""

    def __init__(
        self, nodes: Sequence[Node], seed: int, defrag: bool = True, backlog: bool = True
    ) -> None:
        self.world = World()
        self.defrag = defrag
        self.backlog = backlog
        self.moves = 0
        self.capacity_gpus = sum(n.gpus for n in nodes)
        self.allocated_gpus = 0
        self.placer = Placer(self.world, Config(), T0)
        models = sorted({n.model for n in nodes if n.gpus})
        self.classes = {m: class_name(m) for m in models}
        self.resources = {class_name(m): resource_name(m) for m in models}
        if len(set(self.classes.values())) != len(models):
            raise ValueError(f"GPU models {models} do not make distinct class names")
        for i, m in enumerate(models):
            self._apply(_gpu_class(self.classes[m], resource_name(m), i))
        # Nodes are named in the seed's node order: the binder breaks ties by node name,
        # so the order is the replay's, as it is for every baseline.
        width = len(str(len(nodes)))
        for rank, n in enumerate(nodes):
            name = f"n{rank:0{width}d}-{n.name}"
            self._apply(_node(name, n))
            if n.gpus:
                template = _device(name, self.classes[n.model], models.index(n.model))
                for slot in range(n.gpus):
                    self._apply(_copy(template, name, slot))
        self._vms: dict[int, dict[str, Any]] = {}
        self._stopped = 0
        self._stops = 0
        self._no_room: set[tuple[int, int, DemandKey]] = set()

    def _apply(self, obj: Any, kind: Literal["ADDED", "MODIFIED", "DELETED"] = "ADDED") -> None:
        self.world.apply(WatchEvent(kind, obj))

    def key(self, i: int) -> str:
        return f"{NAMESPACE}/vm-{i:06d}"

    def submit(self, arrivals: Sequence[Order]) -> None:
        if not self.backlog:
            return
        for i, order in enumerate(arrivals, start=1):
            self._create(i, order)

    def _create(self, i: int, order: Order) -> bool:
        """Create arrival i's VM, unless no class here serves it."""
        if i in self._vms:
            return True
        accepted = sorted(self.classes[m] for m in order.models if m in self.classes)
        if order.models and not accepted:
            return False  # no GPU of its models here: no class to order
        accepted = accepted or sorted(self.classes.values())
        raw = _vm(i, order, accepted, self.resources[accepted[0]])
        self._vms[i] = raw
        self._apply(VirtualMachine.from_dict(raw))
        return True

    def arrive(self, i: int, order: Order) -> bool:
        if not self._create(i, order):
            return False
        key = self.key(i)
        placed = self.placer.complete(key)
        if not placed and self.defrag and self._stopped:
            # An order like one that found no room finds none until something frees or
            # stops (the binder's defrag step skips a key likewise until the world changes).
            memo = (self.world.capacity_gen, self._stops, order.demand)
            moved = 0 if memo in self._no_room else self.placer.make_room(key)
            self.moves += moved
            if moved:
                placed = self.placer.complete(key)
            else:
                self._no_room.add(memo)
        if placed:
            self.allocated_gpus += order.gpus
        return placed

    def stop(self, i: int, order: Order) -> None:
        raw = self._vms.get(i)
        if raw is None:
            return
        raw["spec"]["running"] = False
        self._stopped += 1
        self._stops += 1
        self._no_room.clear()
        self._apply(VirtualMachine.from_dict(raw), "MODIFIED")

    def leave(self, i: int, order: Order) -> None:
        raw = self._vms.pop(i, None)
        if raw is None:
            return
        if not raw["spec"]["running"]:
            self._stopped -= 1
        self.allocated_gpus -= self.placer.release_set(self.key(i), "its VM was deleted")
        self._apply(VirtualMachine.from_dict(raw), "DELETED")


def binder_run(defrag: bool = True, backlog: bool = True) -> RunFactory:
    """Runs of the binder's own placement (the workload is learned from the VMs it sees;
    without `backlog`, an arrival's VM is created only when it arrives)."""

    def start(nodes: Sequence[Node], workload: Sequence[Order], seed: int) -> Run:
        return BinderRun(nodes, seed, defrag, backlog)

    return start


def _gpu_class(name: str, resource: str, index: int) -> GPUClass:
    return GPUClass(
        metadata=ObjectMeta(name=name),
        spec=GPUClassSpec(
            resource_name=resource,
            match=DeviceMatch(vendor_id="0x10de", device_ids=(_device_id(index),)),
            # The trace has no device resets between tenants.
            cleaning="None",
        ),
    )


def _device_id(index: int) -> str:
    return f"0x{0x1000 + index:04x}"


def _node(name: str, n: Node) -> KubeNode:
    return KubeNode.from_dict(
        {
            "metadata": {"name": name},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": f"{n.cpu_milli}m", "memory": f"{n.memory_mib}Mi"},
            },
        }
    )


def _pci(slot: int) -> str:
    return f"0000:{0x10 + slot:02x}:00.0"


def _device(node: str, class_name: str, index: int) -> GPUDevice:
    return GPUDevice(
        metadata=ObjectMeta(name=device_name(node, _pci(0)), finalizers=(FINALIZER,)),
        spec=GPUDeviceSpec(
            node_name=node, pci_address=_pci(0), slot=0, device_id=_device_id(index)
        ),
        status=GPUDeviceStatus(class_name=class_name, phase=Phase.AVAILABLE),
    )


def _copy(template: GPUDevice, node: str, slot: int) -> GPUDevice:
    """The template device in another slot (model_copy: no validation per device)."""
    pci = _pci(slot)
    return template.model_copy(
        update={
            "metadata": template.metadata.model_copy(update={"name": device_name(node, pci)}),
            "spec": template.spec.model_copy(update={"pci_address": pci, "slot": slot}),
        }
    )


def _vm(i: int, order: Order, accepted: list[str], resource: str) -> dict[str, Any]:
    """The VM an order is: GPU entries naming `resource` (its first acceptable class's),
    every acceptable class in the classes annotation."""
    meta: dict[str, Any] = {"name": f"vm-{i:06d}", "namespace": NAMESPACE, "uid": f"uid-{i}"}
    if len(accepted) > 1:
        meta["annotations"] = {CLASSES_ANNOTATION: ",".join(accepted)}
    return {
        "metadata": meta,
        "spec": {
            "running": True,
            "template": {
                "spec": {
                    "domain": {
                        "devices": {
                            "gpus": [
                                {"name": f"gpu{j}", "deviceName": resource}
                                for j in range(order.gpus)
                            ]
                        },
                        "resources": {
                            "requests": {
                                "cpu": f"{order.cpu_milli}m",
                                "memory": f"{order.memory_mib}Mi",
                            }
                        },
                    }
                }
            },
        },
    }
