"""Orders: bind every VM that should hold GPUs, oldest first; release expired reservations."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpu_binder.api.types import BindReason, GPUDevice
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.binder.steps.completion import complete, current_set, missing


def order_keys(ctx: Context) -> list[str]:
    world = ctx.world
    keys = [k for k, vm in world.vms.items() if vm.metadata.deletion_timestamp is None]
    for vmi in world.vmis.values():
        if vmi.vm_name is None and vmi.live:
            keys.append(vmi.key)
    return keys


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
    times = [
        t
        for d in devs
        for t in (d.status.detached_at, d.status.binding and d.status.binding.bound_at)
        if isinstance(t, datetime)
    ]
    if times:
        return max(times)
    vm = ctx.world.vms.get(key)
    return vm.metadata.creation_timestamp if vm is not None else None


def orders(ctx: Context) -> None:
    world = ctx.world
    todo: list[tuple[str, str, dict[str, int]]] = []
    clean = ctx.memory.clean.setdefault("orders", {})
    for key in order_keys(ctx):
        signature = (world.devices.key_gen.get(key), world.class_gen)
        if clean.get(key) == signature:
            continue
        order = world.order_of(key)
        if not order:
            continue
        live = world.live_vmis(key)
        vm = world.vms.get(key)
        devs = world.devices.set_of(key)
        stopped = not live and not (vm is not None and vm.running)
        if stopped:
            limit = release_after(ctx, order)
            since = stopped_since(ctx, key, devs)
            if limit is not None and since is not None and ctx.now - since >= limit:
                for d in devs:
                    ops.release(ctx, d, f"the VM has been stopped for longer than {limit}")
                continue
        if not missing(order, current_set(ctx, key)):
            ctx.memory.unplaceable.pop(key, None)
            if not stopped or release_after(ctx, order) is None:
                clean[key] = signature  # only a clock could change this decision
            continue
        running_on = {v.node_name for v in live if v.node_name}
        if running_on and not any(d.spec.node_name in running_on for d in devs):
            # Its VMI runs where the set has nothing: a set bound on another node could never
            # be used by it and would only go through cleaning when the attachments step
            # adopts the VMI's devices on its own node (after attachmentGrace).
            continue
        created = vm.metadata.creation_timestamp if vm is not None else None
        todo.append(((created or ctx.now).isoformat(), key, order))
    todo.sort()
    for _, key, order in todo:
        if ctx.memory.unplaceable.get(key) == world.capacity_gen:
            continue  # nothing freed since it last failed; a resync would only repeat it
        outcome = complete(ctx, key, order, BindReason.ORDER, may_move=not world.live_vmis(key))
        if outcome.ok:
            ctx.memory.unplaceable.pop(key, None)
            ctx.unsay(f"order/{key}")
        else:
            ctx.memory.unplaceable[key] = world.capacity_gen
            ctx.say(
                f"order/{key}",
                ops.vm_note(
                    ctx, key, "GPUUnplaceable", f"cannot bind: {outcome.message}", warning=True
                ),
            )
