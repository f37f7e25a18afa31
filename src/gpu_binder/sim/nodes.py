"""Node objects of the embedded cluster: Ready condition, cordon, device-plugin allocatable."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpu_binder.api.kubevirt import Node
from gpu_binder.sim.builders import node_object, ready_condition
from gpu_binder.sim.launcher import SCHEDULABLE_LABEL, VIRTUALIZATION_DEVICES
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire


async def create_node(
    client: MemoryClient, name: str, now: datetime, labels: Mapping[str, str] | None = None
) -> Node:
    """A node as its kubelet registers it, labelled schedulable by its virt-handler's
    heartbeat (pkg/virt-handler/heartbeat/heartbeat.go), which KubeVirt's pods select, and
    serving virt-handler's permanent device plugins, which every launcher pod asks a unit
    of (sim.launcher)."""
    return await client.create(
        node_object(
            name,
            now,
            labels={SCHEDULABLE_LABEL: "true", **(labels or {})},
            allocatable=VIRT_HANDLER_UNITS,
        )
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
# virt-handler's permanent device plugins: kvm, tun and vhost-net, each with --max-devices
# units (pkg/virt-handler/device-manager/device_controller.go PermanentHostDevicePlugins;
# cmd/virt-handler/virt-handler.go maxDevices = 1000).
VIRT_HANDLER_UNITS = dict.fromkeys(VIRTUALIZATION_DEVICES, 1000)


def _kept(key: str) -> bool:
    """Allocatable the GPU device plugins do not report: the node's own, virt-handler's."""
    return key in NODE_OWN or key in VIRT_HANDLER_UNITS


async def set_allocatable(
    client: MemoryClient, name: str, allocatable: Mapping[str, int]
) -> Node | None:
    """Replace the node's GPU device-plugin units with allocatable (written only when
    changed); its CPU and memory and virt-handler's units stay, as the kubelet reports
    them beside the plugins' units."""

    def change(node: Node) -> Node | None:
        if {k: v for k, v in node.allocatable.items() if not _kept(k)} == dict(allocatable):
            return None
        raw = wire(node)
        status = raw.setdefault("status", {})
        kept = {k: v for k, v in (status.get("allocatable") or {}).items() if _kept(k)}
        status["allocatable"] = {**kept, **{k: str(v) for k, v in sorted(allocatable.items())}}
        return Node.from_dict(raw)

    return await modify(client, Node, name, "", change, status=True)
