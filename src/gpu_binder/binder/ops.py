"""The decisions every step shares: bind a device, release it, place an order."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    Binding,
    BindReason,
    GPUDevice,
    ObjectRef,
    Phase,
)
from gpu_binder.binder.context import Context
from gpu_binder.binder.plan import Note
from gpu_binder.placement import POLICIES, Candidate, Placement, choose


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


def device_note(d: GPUDevice, reason: str, message: str, warning: bool = False) -> Note:
    meta: ObjectMeta = d.metadata
    return Note(
        "GPUDevice", "", meta.name, meta.uid, reason, message, "Warning" if warning else "Normal"
    )


def bind(ctx: Context, d: GPUDevice, key: str, reason: BindReason, why: str) -> GPUDevice:
    """Reserve d for the order key; the VM gets an Event saying why."""
    status = d.status.model_copy(
        update={
            "binding": Binding(vm=order_ref(ctx, key), bound_at=ctx.now, reason=reason),
            "phase": Phase.BOUND,
            "attachment": None,
            "detached_at": None,
            "released_at": None,
        }
    )
    new = d.model_copy(update={"status": status})
    note = vm_note(
        ctx, key, f"GPU{reason.value}", f"bound {d.metadata.name} on {d.spec.node_name}: {why}"
    )
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
        note = vm_note(ctx, key, "GPUReleased", f"released {d.metadata.name}: {why}")
    ctx.plan.device_status(new, note, placement=True)
    return new


def describe(order: Mapping[str, int]) -> str:
    return ", ".join(f"{n} × {c}" for c, n in sorted(order.items()))


def candidates(
    ctx: Context, order: Mapping[str, int], only: str | None = None, exclude: str | None = None
) -> list[Candidate]:
    """Nodes that could take the order: usable, not degraded, holding free devices."""
    first = max(order, key=lambda c: (order[c], c))
    free = ctx.world.devices.free.get(first, {})
    nodes = [only] if only is not None else list(free)
    out: list[Candidate] = []
    for node in nodes:
        if node == exclude or node in ctx.memory.degraded or not ctx.world.node_usable(node):
            continue
        counts = {c: len(ctx.world.devices.free_on(c, node)) for c in order}
        out.append(Candidate(node, counts))
    return out


def place(
    ctx: Context,
    order: Mapping[str, int],
    only: str | None = None,
    exclude: str | None = None,
) -> Placement | None:
    """Where the order goes under its class's policy and topology, or None."""
    if not order:
        return None
    first = max(order, key=lambda c: (order[c], c))
    cls = ctx.world.classes.get(first)
    policy = cls.spec.placement.policy if cls is not None else "Pack"
    topology = cls.spec.placement.topology if cls is not None else "Node"
    devices = ctx.world.devices

    def load_free(class_name: str, node: str) -> list[GPUDevice]:
        return [devices.by_name[n] for n in devices.free_on(class_name, node)]

    def load_domains(class_name: str, node: str) -> dict[str, int]:
        from gpu_binder.placement.topology import domain_of

        sizes: dict[str, int] = {}
        for n in devices.names_on(node):
            d = devices.by_name[n]
            if d.status.class_name == class_name:
                k = domain_of(d, topology)
                sizes[k] = sizes.get(k, 0) + 1
        return sizes

    return choose(
        order,
        candidates(ctx, order, only, exclude),
        POLICIES[policy],
        load_free,
        topology,
        load_domains,
    )


def shortfall(ctx: Context, order: Mapping[str, int]) -> str:
    """Why an order does not fit, in words a tenant understands."""
    parts = []
    for class_name, count in sorted(order.items()):
        best_node, best = "", 0
        for node, names in ctx.world.devices.free.get(class_name, {}).items():
            if node in ctx.memory.degraded or not ctx.world.node_usable(node):
                continue
            if len(names) > best or (len(names) == best and node < best_node):
                best_node, best = node, len(names)
        where = f" on {best_node}" if best else ""
        parts.append(f"{count} × {class_name} requested; the largest free set is {best}{where}")
    if len(order) > 1:
        parts.append("all of them must be on one node")
    return "; ".join(parts)
