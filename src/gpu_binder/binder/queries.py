"""Questions about sets and nodes that several steps ask, and the webhook too.

They read the world and, where a node's health matters, the nodes the binder counts
degraded (its own memory in a pass; a webhook replica reads the nodes' GPUDegraded
condition instead): explicit inputs, so that asking needs no pass and no step imports
another for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from gpu_binder.api.kubevirt import Node
from gpu_binder.api.types import NODE_ANNOTATION, GPUClass, GPUDevice, Phase
from gpu_binder.cache.world import World


def current_set(world: World, key: str) -> list[GPUDevice]:
    """The usable part of a set: Lost devices are on their way out of it.

    Unless a live VMI (scheduled or not) holds the set: its Lost device stays until the VMI
    ends, as no rebind may happen meanwhile. Counting it as missing would bind a
    replacement and release the Lost device (or, while attached, the replacement) as
    beyond the order, on every pass, until the node has nothing free.
    """
    devs = world.devices.set_of(key)
    if world.live_vmis(key):
        return devs
    return [d for d in devs if d.status.phase != Phase.LOST]


def held(devs: list[GPUDevice]) -> dict[str, int]:
    """The devices of a set, counted by class."""
    counts: dict[str, int] = {}
    for d in devs:
        counts[d.status.class_name] = counts.get(d.status.class_name, 0) + 1
    return counts


def missing(order: Mapping[str, int], have: list[GPUDevice]) -> dict[str, int]:
    """What the set `have` lacks of the order, by class."""
    counts = held(have)
    return {c: n - counts.get(c, 0) for c, n in order.items() if n > counts.get(c, 0)}


def in_place(world: World, key: str, devs: list[GPUDevice]) -> bool:
    """A set with a live VMI, scheduled or not, stays where it is."""
    return bool(world.live_vmis(key)) or any(d.status.attachment for d in devs)


def move_reason(
    world: World, degraded: Set[str], key: str, node: str, devs: list[GPUDevice]
) -> str:
    """Why the set `devs` of `key` must leave `node` (while nothing runs on it), or ""."""
    vm = world.vms.get(key)
    wanted = vm.metadata.annotations.get(NODE_ANNOTATION) if vm is not None else None
    if wanted and wanted != node:
        return f"the VM asks for node {wanted}"
    n = world.nodes.get(node)
    if n is None:
        return f"node {node} is gone"
    if n.unschedulable:
        return f"node {node} is cordoned"
    if not n.ready:
        return f"node {node} is not Ready"
    if node in degraded:
        return f"node {node} is degraded"
    for d in devs:
        if d.spec.unschedulable:
            return f"device {d.metadata.name} is marked unschedulable"
    return ""


def reported_degraded(node: Node) -> bool:
    """Whether the node carries the GPUDegraded=True condition a binder set on it."""
    for c in (node.raw.get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == "GPUDegraded":
            return c.get("status") == "True"
    return False


def matching_classes(world: World, d: GPUDevice) -> list[GPUClass]:
    """The classes whose spec.match the device (on its node's labels) satisfies."""
    node = world.nodes.get(d.spec.node_name)
    labels = node.metadata.labels if node is not None else {}
    out = []
    for cls in world.classes.values():
        m = cls.spec.match
        if m.vendor_id != d.spec.vendor_id:
            continue
        if m.device_ids and d.spec.device_id not in m.device_ids:
            continue
        if any(labels.get(k) != v for k, v in m.node_selector.items()):
            continue
        out.append(cls)
    return out


def largest_free_set(world: World, degraded: Set[str], class_name: str) -> int:
    """The largest set of the class one node could take now: its most free devices, or
    under NUMA or NVLink topology the most that placement would pick there."""
    groups = world.devices.states.groups.get(class_name, {})
    usable = world.node_usable
    cls = world.classes.get(class_name)
    topology = cls.spec.placement.topology if cls is not None else "Node"
    best = 0
    # Nodes are grouped by free state: the first usable node of the fullest state wins,
    # so this costs the states (a few dozen), not the nodes; under topology the nodes of
    # the fullest states until none can beat what was found.
    for state in sorted(groups, reverse=True):
        if state[0] <= best:
            break
        for node in groups[state]:
            if node in degraded or not usable(node):
                continue
            if topology == "Node":
                return state[0]
            best = max(best, _pickable(world, class_name, node, topology))
    return best


def _pickable(world: World, class_name: str, node: str, topology: str) -> int:
    """The largest order placement.pick_devices takes on the node: one that fits a domain's
    free devices, or any up to all free once no domain of the node is that big."""
    devices = world.devices
    free = devices.free_on(class_name, node)
    sizes = devices.domain_sizes(class_name, node, topology)
    if len(free) > max(sizes.values(), default=0):
        return len(free)
    return max(devices.domain_sizes(class_name, node, topology, within=free).values())
