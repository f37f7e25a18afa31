"""Orders: bind every VM that should hold GPUs, oldest first, at most `Config.orders_per_pass`
a pass (the next pass runs at once, after the requests waiting); release expired
reservations."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpu_binder.api.types import BindReason, GPUDevice
from gpu_binder.binder import ops
from gpu_binder.binder.completion import complete
from gpu_binder.binder.context import Context
from gpu_binder.binder.deadlines import Deadlines
from gpu_binder.binder.queries import current_set, largest_free_set, missing


@dataclass
class OrdersMemory:
    # The capacity generation the orders waiting for room (Memory.waiting) were last
    # retried in: something freed since, and they are retried.
    unplaceable_checked: int = -1
    # Clean orders whose verdict a clock will change (a reservation running out).
    order_deadlines: Deadlines = field(default_factory=Deadlines)
    # The last orders step stopped at Config.orders_per_pass binds: the pass runs again.
    more: bool = False


def order_keys(ctx: Context) -> list[str]:
    """Every order in a full sweep; else the changed ones and those waiting for room."""
    world = ctx.world
    scope = ctx.scope
    clean = ctx.memory.verdicts("orders")
    mine, waiting = ctx.memory.of(OrdersMemory), ctx.memory.waiting
    if scope.full:
        # Keys found clean keep their verdict until an event or their deadline comes.
        deadlines = mine.order_deadlines
        wanted = set(scope.sweep(world.vms, clean)) | scope.changed_keys(world)
        wanted.update(deadlines.due(ctx.now))
        wanted.update(waiting.unplaceable)
        wanted.update(world.standalone)
        candidates = sorted(wanted)
    else:
        changed = ctx.scope.changed_keys(world)
        if mine.unplaceable_checked != world.capacity_gen:
            # Something freed: orders that found no room may find it now.
            mine.unplaceable_checked = world.capacity_gen
            changed = changed | set(waiting.unplaceable)
        # A GPU given up in its namespace: an order its quota held back may fit now.
        changed = changed | {
            k for k in waiting.quota_blocked if waiting.unplaceable.get(k) != _memo(ctx, k)
        }
        candidates = sorted(changed)
    keys = []
    for k in candidates:
        vm = world.vms.get(k)
        if vm is not None:
            if vm.metadata.deletion_timestamp is None:
                keys.append(k)
            else:
                waiting.unplaceable.pop(k, None)  # going: it waits for room no more
        # A standalone VMI being deleted runs on until it ends, but is placed nothing new.
        elif any(v.vm_name is None and not v.being_deleted for v in world.live_vmis(k)):
            keys.append(k)
        else:
            _forget(ctx, k)
    if scope.full:
        ctx.prune_said()
    clean.looked_at(keys)
    return keys


def _forget(ctx: Context, key: str) -> None:
    """The order is gone (its VM, or its standalone VMI): its deletion touched its key, so
    this costs a lookup per change, and memory holds only orders that exist."""
    memory = ctx.memory
    memory.of(OrdersMemory).order_deadlines.discard(key)  # nothing left to run out
    memory.waiting.unplaceable.pop(key, None)
    memory.waiting.quota_blocked.discard(key)
    for step in ("orders", "defrag"):  # the verdicts kept about orders waiting for room
        clean = memory.verdicts(step)
        clean.pop(key, None)
        clean.unclean.discard(key)
    if key not in ctx.world.vmis:
        ctx.forget_object(key)  # a VMI of that name, ended, may still be told about


def _settled(ctx: Context, key: str, signature: object, deadline: datetime) -> None:
    ctx.memory.verdicts("orders")[key] = (signature, deadline)
    deadlines = ctx.memory.of(OrdersMemory).order_deadlines
    if deadline.year < datetime.max.year:
        deadlines.set(key, deadline)
    else:
        deadlines.discard(key)


def release_after(ctx: Context, order: dict[str, int]) -> timedelta | None:
    """The shortest reservation of the ordered classes; None holds for as long as the VM lives."""
    out: timedelta | None = None
    for class_name in order:
        cls = ctx.world.classes.get(class_name)
        r = cls.spec.release_after if cls is not None else None
        if r is not None and (out is None or r < out):
            out = r
    return out


def stopped_since(ctx: Context, key: str, devs: list[GPUDevice]) -> datetime | None:
    """When the stopped order stopped (ops.stopped_since); a VM holding no set counts from
    its creation."""
    since = ops.stopped_since(devs)
    if since is not None:
        return since
    vm = ctx.world.vms.get(key)
    return vm.metadata.creation_timestamp if vm is not None else None


def orders(ctx: Context) -> None:
    world = ctx.world
    todo: list[tuple[datetime, str, dict[str, int]]] = []
    clean = ctx.memory.verdicts("orders")
    waiting = ctx.memory.waiting
    unplaceable = waiting.unplaceable
    deadlines = ctx.memory.of(OrdersMemory).order_deadlines
    for key in order_keys(ctx):
        memo = unplaceable.get(key)
        if memo is not None and memo == _memo(ctx, key):
            continue  # it failed, and nothing freed or changed since
        signature = (world.devices.key_gen.get(key), world.class_gen)
        cached = clean.get(key)
        if isinstance(cached, tuple) and cached[0] == signature and ctx.now < cached[1]:
            continue
        # Judged anew: it is clean again only if this judgement finds it so.
        clean.forget(key)
        deadlines.discard(key)
        order = world.order_of(key)
        if not order:
            continue
        live = world.live_vmis(key)
        vm = world.vms.get(key)
        devs = world.devices.set_of(key)
        stopped = not world.runs(key)
        deadline = datetime.max.replace(tzinfo=ctx.now.tzinfo)
        if stopped:
            limit = release_after(ctx, order)
            since = stopped_since(ctx, key, devs)
            if limit is not None and since is not None:
                if ctx.now - since >= limit:
                    # Only this VM's own: what an earlier VM of its name holds goes with
                    # that VM's VMI, which may still run (invariant 3).
                    for d in world.own_set(key):
                        ops.release(ctx, d, f"the VM has been stopped for longer than {limit}")
                    if not devs:
                        _settled(ctx, key, signature, deadline)  # until it starts or changes
                    continue
                deadline = since + limit  # the reservation runs out then, with no event
        if not missing(order, current_set(world, key)):
            waiting.unplaceable.pop(key, None)
            _settled(ctx, key, signature, deadline)
            continue
        running_on = {v.node_name for v in live if v.node_name}
        if running_on and not any(d.spec.node_name in running_on for d in devs):
            # Its VMI runs where the set has nothing: a set bound on another node could never
            # be used by it and would only go through cleaning when the attachments step
            # adopts the VMI's devices on its own node (after attachmentGrace).
            continue
        created = vm.metadata.creation_timestamp if vm is not None else None
        todo.append((created or ctx.now, key, order))
    todo.sort()
    largest: dict[str, int] = {}
    mine = ctx.memory.of(OrdersMemory)
    most, bound, mine.more = ctx.config.orders_per_pass, 0, False
    for i, (_, key, order) in enumerate(todo):
        if most and bound >= most:
            # The rest stay changed for the next pass, which runs at once, after the
            # requests waiting; an aborted pass gives back the keys it took as well.
            for _, left, _ in todo[i:]:
                world.devices.touch_key(left)
            mine.more = True
            break
        if _hopeless(ctx, key, order, largest):
            continue
        outcome = complete(ctx, key, order, BindReason.ORDER, may_move=not world.live_vmis(key))
        largest.clear()  # a bind changes what is free
        if outcome.ok:
            bound += 1
            waiting.unplaceable.pop(key, None)
            waiting.quota_blocked.discard(key)
            ctx.unsay(f"order/{key}")
        elif outcome.quota is not None:
            # It waits for its namespace's GPUs or quota, not for room: no room is made.
            waiting.quota_blocked.add(key)
            waiting.unplaceable[key] = _memo(ctx, key)
            ctx.say(
                f"order/{key}",
                ops.vm_note(ctx, key, "GPUQuotaExceeded", outcome.message, warning=True),
            )
        else:
            waiting.quota_blocked.discard(key)
            if key not in waiting.unplaceable:
                waiting.defrag_wanted = True  # a new order waits: room may be made for it
            waiting.unplaceable[key] = _memo(ctx, key)
            ctx.say(
                f"order/{key}",
                ops.vm_note(
                    ctx, key, "GPUUnplaceable", f"cannot bind: {outcome.message}", warning=True
                ),
            )


def _hopeless(ctx: Context, key: str, order: dict[str, int], largest: dict[str, int]) -> bool:
    """An order that failed before and that no node's free devices could hold now.

    Retrying it would cost a search of every node and say what it said before.
    """
    unplaceable = ctx.memory.waiting.unplaceable
    if key not in unplaceable:
        return False
    if unplaceable[key] == _memo(ctx, key):
        return True  # nothing freed and nothing ordered anew since it last failed
    if ctx.world.alternatives_of(key):
        return False  # another class may have room: only the placement itself can tell
    have = current_set(ctx.world, key)
    need = missing(order, have)
    for class_name, count in need.items():
        if class_name not in largest:
            largest[class_name] = largest_free_set(ctx.world, ctx.memory.degraded, class_name)
        if largest[class_name] >= count:
            return False
    unplaceable[key] = _memo(ctx, key)
    return True


def _memo(ctx: Context, key: str) -> tuple[int, int | None, int, int]:
    w = ctx.world
    released = w.devices.released_in.get(key.partition("/")[0], 0)
    return (w.capacity_gen, w.devices.key_gen.get(key), w.class_gen, released)
