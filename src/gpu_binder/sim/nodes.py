"""Node objects of the embedded cluster: Ready condition, cordon, device-plugin allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpu_binder.api.kubevirt import Node
from gpu_binder.sim.builders import node_object, ready_condition
from gpu_binder.sim.launcher import SCHEDULABLE_LABEL
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire


async def create_node(
    client: MemoryClient, name: str, now: datetime, labels: Mapping[str, str] | None = None
) -> Node:
    """A node as its kubelet registers it, labelled schedulable by its virt-handler's
    heartbeat (pkg/virt-handler/heartbeat/heartbeat.go), which KubeVirt's pods select."""
    return await client.create(
        node_object(name, now, labels={SCHEDULABLE_LABEL: "true", **(labels or {})})
    )


async def set_ready(client: MemoryClient, name: str, ready: bool, now: datetime) -> Node | None:
    """Report the node Ready or not; the transition time moves only when the status does."""

    def change(node: Node) -> Node | None:
        if node.ready == ready:
            return None
        raw = wire(node)
        status = raw.setdefault("status", {})
        others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        status["conditions"] = [*others, ready_condition(ready, now)]
        return Node.from_dict(raw)

    return await modify(client, Node, name, "", change, status=True)


async def cordon(client: MemoryClient, name: str, unschedulable: bool = True) -> Node | None:
    """Set spec.unschedulable, as `kubectl cordon` (or uncordon with False) does."""

    def change(node: Node) -> Node | None:
        if node.unschedulable == unschedulable:
            return None
        raw = wire(node)
        spec = raw.setdefault("spec", {})
        if unschedulable:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        return Node.from_dict(raw)

    return await modify(client, Node, name, "", change)


# Allocatable the kubelet reports of the node itself, not of a device plugin.
NODE_OWN = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})


async def set_allocatable(
    client: MemoryClient, name: str, allocatable: Mapping[str, int]
) -> Node | None:
    """Replace the node's device-plugin units with allocatable (written only when changed);
    its CPU and memory stay, as the kubelet reports them beside the plugins' units."""

    def change(node: Node) -> Node | None:
        if node.allocatable == dict(allocatable):
            return None
        raw = wire(node)
        status = raw.setdefault("status", {})
        kept = {k: v for k, v in (status.get("allocatable") or {}).items() if k in NODE_OWN}
        status["allocatable"] = {**kept, **{k: str(v) for k, v in sorted(allocatable.items())}}
        return Node.from_dict(raw)

    return await modify(client, Node, name, "", change, status=True)
