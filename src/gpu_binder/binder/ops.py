"""The decisions every step shares: bind a device, release it, move a set whole."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    NODE_ANNOTATION,
    Binding,
    BindReason,
    GPUDevice,
    ObjectRef,
    Phase,
)
from gpu_binder.binder import placing
from gpu_binder.binder.context import Context
from gpu_binder.binder.plan import Decision, Note


def order_ref(ctx: Context, key: str) -> ObjectRef:
    """The object an order's devices are bound to: its VM, or a standalone VMI."""
    namespace, _, name = key.partition("/")
    vm = ctx.world.vms.get(key)
    uid = vm.metadata.uid if vm is not None else ""
    if vm is None:
        for vmi in ctx.world.live_vmis(key):
            uid = vmi.metadata.uid
    return ObjectRef(namespace=namespace, name=name, uid=uid)


def order_meta(ctx: Context, key: str) -> tuple[str, str, str, str]:
    """(kind, namespace, name, uid) of the order, for Events about it."""
    ref = order_ref(ctx, key)
    kind = "VirtualMachine" if key in ctx.world.vms else "VirtualMachineInstance"
    return kind, ref.namespace, ref.name, ref.uid


def vm_note(ctx: Context, key: str, reason: str, message: str, warning: bool = False) -> Note:
    kind, ns, name, uid = order_meta(ctx, key)
    return Note(kind, ns, name, uid, reason, message, "Warning" if warning else "Normal")


def decision_note(ctx: Context, key: str, reason: str, decision: Decision) -> Note:
    """The Event on the order of a bind or a release: its facts, rendered when written."""
    kind, ns, name, uid = order_meta(ctx, key)
    return Note(kind, ns, name, uid, reason, "", decision=decision)


def device_note(d: GPUDevice, reason: str, message: str, warning: bool = False) -> Note:
    meta: ObjectMeta = d.metadata
    return Note(
        "GPUDevice", "", meta.name, meta.uid, reason, message, "Warning" if warning else "Normal"
    )


def stopped_since(devs: list[GPUDevice]) -> datetime | None:
    """When the order of this set stopped, as its devices say: the latest of their detaches
    and of the stops their bindings carry (a bind while stopped is no stop: see
    Binding.stopped_at), else of their binds (a set bound while its VM was stopped). A
    detach before the device's bind is its previous tenant's (bind keeps it), not this
    order's stop."""
    out: datetime | None = None
    for d in devs:
        b = d.status.binding
        detached = d.status.detached_at
        if b is not None and detached is not None and detached < b.bound_at:
            detached = None
        for t in (detached, b and (b.stopped_at or b.bound_at)):
            if isinstance(t, datetime) and (out is None or t > out):
                out = t
    return out


def bind(ctx: Context, d: GPUDevice, key: str, reason: BindReason, why: str) -> GPUDevice:
    """Reserve d for the order key; the VM gets an Event saying why.

    Bound while the order is stopped, the device carries the time its set stopped: a move
    or rebind of a stopped set does not start its reservation anew."""
    stopped = None if ctx.world.runs(key) else stopped_since(ctx.world.devices.set_of(key))
    binding = Binding(vm=order_ref(ctx, key), bound_at=ctx.now, reason=reason, stopped_at=stopped)
    status = d.status.model_copy(
        update={
            "binding": binding,
            "phase": Phase.BOUND,
            "attachment": None,
            # The last detach is kept: the next attachment starts no earlier (a node clock
            # behind stamps a VMI's start before the last tenant let go; DESIGN §2.11),
            # and stopped_since reads a detach before the bind as no stop of this order.
            "released_at": None,
        }
    )
    new = d.model_copy(update={"status": status})
    bound = Decision("bound", (d.metadata.name,), d.spec.node_name, why)
    note = decision_note(ctx, key, f"GPU{reason.value}", bound)
    ctx.plan.device_status(new, note, placement=True)
    return new


def release(ctx: Context, d: GPUDevice, why: str) -> GPUDevice:
    """Give d up; it is cleaned before the next tenant unless its class says otherwise."""
    cls = ctx.world.classes.get(d.status.class_name)
    if d.status.phase == Phase.LOST:
        phase = Phase.LOST
    elif cls is not None and cls.spec.cleaning == "None":
        phase = Phase.AVAILABLE
    else:
        phase = Phase.CLEANING
    status = d.status.model_copy(
        update={"binding": None, "attachment": None, "phase": phase, "released_at": ctx.now}
    )
    new = d.model_copy(update={"status": status})
    note = None
    if d.status.binding is not None:
        key = d.status.binding.vm.key
        released = Decision("released", (d.metadata.name,), "", why)
        note = decision_note(ctx, key, "GPUReleased", released)
    ctx.plan.device_status(new, note, placement=True)
    return new


def describe(order: Mapping[str, int]) -> str:
    return ", ".join(f"{n} × {c}" for c, n in sorted(order.items()))


def relocate(
    ctx: Context, key: str, order: dict[str, int], devs: list[GPUDevice], node: str, why: str
) -> str:
    """Move the set whole off node (to the node its VM asks for, if it does): bind on the
    target first, then release the old devices. Returns why it cannot, or "".

    The moves step moves sets by it, and the requests step a set its VMI could not start
    beside before answering."""
    vm = ctx.world.vms.get(key)
    wanted = vm.metadata.annotations.get(NODE_ANNOTATION) if vm is not None else None
    only = wanted if wanted and wanted != node else None
    placed = placing.place(ctx, order, only=only, exclude=node, key=key)
    if placed is None:
        target = f" to {only}" if only else ""
        return f"{why}, but the set cannot move{target}: {placing.shortfall(ctx, order)}"
    for d in placed.devices:
        bind(ctx, d, key, BindReason.MOVE, f"{why}; moved from {node}")
    for d in devs:
        release(ctx, d, f"{why}; the set moved to {placed.node}")
    return ""
