"""Moves and Lost rebinds: sets that must leave their node, while no VMI runs on them."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpu_binder.api.types import BindReason, Phase
from gpu_binder.binder import ops, placing
from gpu_binder.binder.context import Context
from gpu_binder.binder.queries import in_place, move_reason
from gpu_binder.cache.deviceindex import set_node


@dataclass
class MovesMemory:
    # Sets that must move but found no room, retried when something frees (the capacity
    # generation last retried in).
    blocked: set[str] = field(default_factory=set)
    checked: int = -1


def moves(ctx: Context) -> None:
    world = ctx.world
    clean = ctx.memory.verdicts("moves")
    memory = ctx.memory.of(MovesMemory)
    blocked = memory.blocked
    keys = ctx.scope.set_keys(world, clean)
    if blocked and memory.checked != world.capacity_gen:
        # Something freed: a set that could not move may move now.
        memory.checked = world.capacity_gen
        listed = set(keys)
        keys = keys + sorted(k for k in blocked if k in world.devices.by_vm and k not in listed)
    for key in keys:
        cached = clean.get(key)
        if isinstance(cached, tuple) and _still(ctx, key, cached):
            continue
        clean.forget(key)  # judged anew: clean again only if found so
        devs = world.devices.set_of(key)
        if not devs:
            continue
        if in_place(world, key, devs):
            # A VMI's start or end changes the key, and with it this verdict.
            clean[key] = _signature(ctx, key, devs[0].spec.node_name)
            continue
        node = set_node(devs)
        why = move_reason(world, ctx.memory.degraded, key, node, devs)
        if not why:
            blocked.discard(key)
            ctx.unsay(f"move/{key}")
            clean[key] = _signature(ctx, key, node)
            continue
        order = world.order_of(key)
        refusal = ops.relocate(ctx, key, order, devs, node, why)
        if refusal:
            blocked.add(key)
            ctx.say(f"move/{key}", ops.vm_note(ctx, key, "GPUMoveBlocked", refusal, warning=True))
            continue
        blocked.discard(key)
        ctx.unsay(f"move/{key}")


def _signature(ctx: Context, key: str, node: str) -> tuple[object, ...]:
    gens = ctx.world.devices
    return (gens.key_gen.get(key), node, gens.node_gen.get(node), node in ctx.memory.degraded)


def _still(ctx: Context, key: str, cached: tuple[object, ...]) -> bool:
    """Nothing about the set or its node changed since it last had no reason to move."""
    node = cached[1]
    return isinstance(node, str) and cached == _signature(ctx, key, node)


def rebind_lost(ctx: Context) -> None:
    world = ctx.world
    keys = sorted(
        {b.vm.key for n in world.devices.lost if (b := world.devices.by_name[n].status.binding)}
    )
    for key in keys:
        devs = world.devices.set_of(key)
        if in_place(world, key, devs):
            continue  # a running tenant keeps its Lost GPU until its VMI ends
        lost = [d for d in devs if d.status.phase == Phase.LOST]
        healthy = [d for d in devs if d.status.phase != Phase.LOST]
        node = set_node(healthy) if healthy else set_node(devs)
        need: dict[str, int] = {}
        for d in lost:
            need[d.status.class_name] = need.get(d.status.class_name, 0) + 1
        placed = placing.place(ctx, need, only=node, key=key) if healthy else None
        if placed is not None:
            for d in placed.devices:
                ops.bind(ctx, d, key, BindReason.REBIND, f"replaces a Lost device on {node}")
            for d in lost:
                ops.release(ctx, d, f"it is Lost ({d.status.lost_reason}); replaced on {node}")
            continue
        order = world.order_of(key)
        whole = placing.place(ctx, order, exclude=node, key=key) if order else None
        if whole is not None:
            for d in whole.devices:
                ops.bind(
                    ctx,
                    d,
                    key,
                    BindReason.REBIND,
                    f"a device on {node} is Lost; the set moved whole",
                )
            for d in devs:
                ops.release(ctx, d, f"the set moved to {whole.node} after a device was Lost")
            continue
        for d in lost:
            ops.release(ctx, d, f"it is Lost ({d.status.lost_reason}) and no node can replace it")
        ctx.say(
            f"rebind/{key}",
            ops.vm_note(
                ctx,
                key,
                "GPURebindBlocked",
                f"a Lost device left the set and nothing fits: {placing.shortfall(ctx, order)}",
                warning=True,
            ),
        )
