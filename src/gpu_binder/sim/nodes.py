"""Node objects of the embedded cluster: Ready condition, cordon, device-plugin allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import Node
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire

HOSTNAME_LABEL = "kubernetes.io/hostname"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def node_object(
    name: str,
    since: datetime,
    *,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    allocatable: Mapping[str, int] | None = None,
) -> Node:
    """A Node as a kubelet registers it; allocatable holds only device-plugin units."""
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME_LABEL: name, **(labels or {})}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": [_ready_condition(ready, since)],
            "allocatable": {k: str(v) for k, v in sorted((allocatable or {}).items())},
        },
    }
    return Node.from_dict(raw)


def _ready_condition(ready: bool, since: datetime) -> dict[str, str]:
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "lastTransitionTime": _iso(since),
    }


async def create_node(
    client: MemoryClient, name: str, now: datetime, labels: Mapping[str, str] | None = None
) -> Node:
    return await client.create(node_object(name, now, labels=labels))


async def set_ready(client: MemoryClient, name: str, ready: bool, now: datetime) -> Node | None:
    """Report the node Ready or not; the transition time moves only when the status does."""

    def change(node: Node) -> Node | None:
        if node.ready == ready:
            return None
        raw = wire(node)
        status = raw.setdefault("status", {})
        others = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
        status["conditions"] = [*others, _ready_condition(ready, now)]
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


async def set_allocatable(
    client: MemoryClient, name: str, allocatable: Mapping[str, int]
) -> Node | None:
    """Replace the node's device-plugin units with allocatable (written only when changed)."""

    def change(node: Node) -> Node | None:
        if node.allocatable == dict(allocatable):
            return None
        raw = wire(node)
        raw.setdefault("status", {})["allocatable"] = {
            k: str(v) for k, v in sorted(allocatable.items())
        }
        return Node.from_dict(raw)

    return await modify(client, Node, name, "", change, status=True)
