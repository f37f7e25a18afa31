"""Defragmentation: room for an order that fits nowhere, made by moving stopped VMs' sets.

A stopped VM keeps its set (DESIGN §3 orders), so stopped VMs' sets can scatter free GPUs
in pieces no waiting order can use. When an order that wants to run fits on no node, this
step looks for the node where moving the fewest sets of stopped VMs (never a running one,
never a set with a live VMI) would make it fit — GPUs, CPU and memory — and where each
of those sets fits on another node as it is. It moves them (bind on the target first,
then release; reason Move, with the order they made room for in the Event), at most
MOVES_PER_PASS sets per pass (the next pass goes on), and binds the order when the room
is free at once (a class that cleans devices frees them only after the agent's reset,
and the orders step binds the order then). A VM whose owner asked for a node
(gpu.cozystack.io/node) is never moved for room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpu_binder.api.types import NODE_ANNOTATION, BindReason, GPUDevice, Phase
from gpu_binder.binder import ops, placing
from gpu_binder.binder.completion import complete
from gpu_binder.binder.context import Context
from gpu_binder.placement import options

# Sets moved per pass at most: moves cost the tenants of stopped VMs nothing, but each
# is a write and an Event, and a pass must stay short.
MOVES_PER_PASS = 4
# Waiting orders examined per pass at most (each looks at every node of its classes),
# and the cheapest rooms whose sets are checked for a place elsewhere, per order.
ORDERS_PER_PASS = 4
ROOMS_CHECKED = 8


@dataclass(frozen=True, slots=True)
class Victim:
    """A stopped VM's set on the node, and what moving it frees there."""

    key: str
    gpus: int
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class Room:
    node: str
    order: Mapping[str, int]
    victims: tuple[Victim, ...]


# The victims found on a node for a class, by (class, node), through one step's search,
# with the device generation they were found at.
VictimsMemo = dict[tuple[str, str], tuple[int, list["Victim"]]]


@dataclass
class DefragMemory:
    # Per node: its sets with no device attached, by VM key, as of a device generation
    # (_idle_on).
    idle_on_node: dict[str, tuple[int, list[tuple[str, list[GPUDevice]]]]] = field(
        default_factory=dict
    )


def defrag(ctx: Context) -> None:
    waiting = ctx.memory.waiting
    if not (ctx.scope.full or waiting.defrag_wanted):
        return
    waiting.defrag_wanted = False
    world = ctx.world
    clean = ctx.memory.verdicts("defrag")
    budget, examined = MOVES_PER_PASS, 0
    # Each waiting order walks the same nodes: a node's victims for a class are found once
    # while no device changes (only a move this step stages changes one).
    victims: VictimsMemo = {}
    for key in sorted(waiting.unplaceable, key=lambda k: (_created(ctx, k), k)):
        if budget <= 0 or examined >= ORDERS_PER_PASS:
            break
        if clean.get(key) == world.devices.gen or not wants_to_run(ctx, key):
            continue
        if key in waiting.quota_blocked:
            continue  # its quota, not room, holds it back: moving others would not help
        examined += 1
        moved = make_room(ctx, key, budget, victims)
        if moved:
            budget -= moved
            waiting.defrag_wanted = True  # the next pass goes on with it
            order = world.order_of(key)
            if complete(ctx, key, order, BindReason.ORDER, may_move=True).ok:
                waiting.unplaceable.pop(key, None)
        else:
            clean[key] = world.devices.gen  # nothing changed: the same search finds nothing


def wants_to_run(ctx: Context, key: str) -> bool:
    """An order whose VM should run now and that holds no set yet."""
    world = ctx.world
    if world.devices.by_vm.get(key):
        return False
    vm = world.vms.get(key)
    if vm is not None:
        return world.runs(key) and vm.metadata.deletion_timestamp is None
    # A standalone VMI being deleted is shutting down: no room is made for it.
    return any(not v.being_deleted for v in world.live_vmis(key))


def movable(ctx: Context, key: str) -> bool:
    """A set of a stopped VM that nothing runs on and whose owner named no node for it:
    it may change nodes unnoticed."""
    world = ctx.world
    vm = world.vms.get(key)
    if vm is None or world.runs(key) or vm.metadata.deletion_timestamp is not None:
        return False
    if vm.metadata.annotations.get(NODE_ANNOTATION):
        return False
    if world.live_vmis(key):
        return False
    return not any(d.status.attachment is not None for d in world.devices.set_of(key))


def make_room(
    ctx: Context, key: str, budget: int = MOVES_PER_PASS, victims: VictimsMemo | None = None
) -> int:
    """Move stopped VMs' sets so the order of `key` fits; how many sets moved."""
    world = ctx.world
    order = world.order_of(key)
    if not order or budget <= 0:
        return 0
    room = find_room(ctx, key, order, {} if victims is None else victims)
    if room is None:
        return 0
    moved: list[str] = []
    savepoint = ctx.plan.savepoint()
    for v in room.victims[:budget]:
        vorder = world.order_of(v.key)
        placed = placing.place(ctx, vorder, exclude=room.node, key=v.key)
        if placed is None:
            # The one before took its place. Moving only some of this pass's sets would make
            # no room, and the next pass's search would move them back: all, or none.
            ctx.plan.rollback(savepoint)
            return 0
        why = (
            f"the VM is stopped and {key} ({ops.describe(room.order)}) fits on no node as "
            f"it is: moving this set off {room.node} makes room for it"
        )
        old = world.devices.set_of(v.key)
        for d in placed.devices:
            ops.bind(ctx, d, v.key, BindReason.MOVE, why)
        for d in old:
            ops.release(ctx, d, f"the set moved to {placed.node} to make room for {key}")
        moved.append(v.key)
    if moved:
        ctx.plan.note(
            ops.vm_note(
                ctx,
                key,
                "GPUMadeRoom",
                f"moved the sets of stopped VMs {', '.join(moved)} off {room.node} to make "
                f"room for {ops.describe(room.order)}",
            )
        )
    return len(moved)


def find_room(
    ctx: Context, key: str, order: Mapping[str, int], victims: VictimsMemo
) -> Room | None:
    """The node where moving the fewest sets (then the fewest GPUs) makes the order fit,
    each of them fitting on another node as it is (`victims`: each node's, per class, as
    found by this step so far)."""
    world = ctx.world
    devices = world.devices
    cpu, memory = devices.resources.request(key)
    rooms: list[tuple[tuple[int, int, str], Room]] = []
    for option in options(order, world.alternatives_of(key)):
        if len(option) != 1:
            continue  # sets of one class: what orders are, save rare mixed ones
        [(class_name, count)] = option.items()
        if devices.free_count.get(class_name, 0) < count:
            continue  # moves keep the class's free GPUs as many: too few to make room
        for node in devices.class_nodes.get(class_name, {}):
            if not placing.usable(ctx, node):
                continue
            free = len(devices.free_on(class_name, node))
            cpu_free, memory_free = devices.resources.free(node)
            need = (count - free, cpu - cpu_free, memory - memory_free)
            if max(need) <= 0:
                return None  # it fits already: the orders step will bind it
            found = victims.get((class_name, node))
            if found is None or found[0] != devices.gen:
                found = victims[class_name, node] = (devices.gen, _victims(ctx, class_name, node))
            chosen = _fewest([v for v in found[1] if v.key != key], need)
            if chosen is not None:
                cost = (len(chosen), sum(v.gpus for v in chosen), node)
                rooms.append((cost, Room(node, option, chosen)))
    # Where each set can go is the costly question: asked in order of cost, until one does,
    # for the few cheapest rooms only (a pass must stay short).
    for _, room in sorted(rooms, key=lambda r: r[0])[:ROOMS_CHECKED]:
        if all(_fits_elsewhere(ctx, v.key, room.node) for v in room.victims):
            return room
    return None


def _idle_on(ctx: Context, node: str) -> list[tuple[str, list[GPUDevice]]]:
    """The node's bound devices by VM key, of the sets with no device attached there (one
    attached is in use, and most sets of a node are running VMs'), kept until a device of
    the node changes: a search walks every node of a class, again on each resync, and most
    nodes are as the last search found them."""
    devices = ctx.world.devices
    gen = devices.node_gen.get(node, 0)
    memory = ctx.memory.of(DefragMemory)
    cached = memory.idle_on_node.get(node)
    if cached is not None and cached[0] == gen:
        return cached[1]
    by_key: dict[str, list[GPUDevice]] = {}
    for name in devices.names_on(node):
        d = devices.by_name[name]
        if d.status.binding is not None:
            by_key.setdefault(d.status.binding.vm.key, []).append(d)
    idle = [(k, devs) for k, devs in sorted(by_key.items()) if not _attached(devs)]
    memory.idle_on_node[node] = (gen, idle)
    return idle


def _victims(ctx: Context, class_name: str, node: str) -> list[Victim]:
    devices = ctx.world.devices
    out: list[Victim] = []
    for vkey, devs in _idle_on(ctx, node):
        if not movable(ctx, vkey):
            continue
        # What the node gets back: devices of the class a new tenant may take once released.
        gpus = sum(1 for d in devs if d.status.class_name == class_name and _reusable(d))
        cpu, memory = devices.resources.counted.get((vkey, node), (0, 0))
        if gpus or cpu or memory:
            out.append(Victim(vkey, gpus, cpu, memory))
    return out


def _attached(devs: list[GPUDevice]) -> bool:
    return any(d.status.attachment is not None for d in devs)


def _reusable(d: GPUDevice) -> bool:
    """Free once released (after cleaning, if its class cleans): see world.is_free."""
    return (
        d.status.phase != Phase.LOST
        and not d.spec.unschedulable
        and d.spec.health == "Healthy"
        and d.metadata.deletion_timestamp is None
    )


def _fewest(victims: list[Victim], need: tuple[int, int, int]) -> tuple[Victim, ...] | None:
    """The fewest victims covering what the node lacks: one if one will do (the smallest),
    else the biggest first; None if all of them would not do."""

    def covers(vs: tuple[Victim, ...]) -> bool:
        return (
            sum(v.gpus for v in vs) >= need[0]
            and sum(v.cpu for v in vs) >= need[1]
            and sum(v.memory for v in vs) >= need[2]
        )

    singles = [v for v in victims if covers((v,))]
    if singles:
        return (min(singles, key=lambda v: (v.gpus, v.key)),)
    chosen: list[Victim] = []
    for v in sorted(victims, key=lambda v: (-v.gpus, v.key)):
        chosen.append(v)
        if covers(tuple(chosen)):
            return tuple(chosen)
    return None


def _fits_elsewhere(ctx: Context, key: str, node: str) -> bool:
    return placing.place(ctx, ctx.world.order_of(key), exclude=node, key=key) is not None


def _created(ctx: Context, key: str) -> str:
    vm = ctx.world.vms.get(key)
    t = vm.metadata.creation_timestamp if vm is not None else None
    return t.isoformat() if t is not None else ""
