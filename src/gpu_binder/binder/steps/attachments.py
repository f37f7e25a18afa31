"""Attachments: which bound devices a live VMI uses; adoption of unmanaged VMIs."""

from __future__ import annotations

from datetime import datetime

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    Attachment,
    BindReason,
    GPUDevice,
    ObjectRef,
    Phase,
)
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.binder.world import vm_key_of_vmi


def attachments(ctx: Context) -> None:
    _detach_ended(ctx)
    world = ctx.world
    if ctx.scope.full:
        _prune_unmanaged(ctx)
    clean = ctx.memory.verdicts("attach")
    for vmi in ctx.scope.vmis(world, clean):
        if not vmi.live:
            _managed(ctx, vmi.key, vmi.metadata.uid)  # it ended: nothing to adopt any more
            continue
        if not vmi.node_name:
            continue
        signature = (world.devices.key_gen.get(vm_key_of_vmi(vmi)), world.class_gen)
        cached = clean.get(vmi.key)
        if isinstance(cached, tuple) and cached[0] is vmi and cached[1] == signature:
            continue
        mark = ctx.mark()
        settled = _attach(ctx, vmi)
        if settled and ctx.mark() == mark:
            clean[vmi.key] = (vmi, signature)
        else:
            clean.forget(vmi.key)


def vmi_devices(vmi: VirtualMachineInstance) -> set[str] | None:
    """The devices the webhook admitted the VMI with, or None when it did not say."""
    raw = vmi.metadata.annotations.get(DEVICES_ANNOTATION)
    return {n for n in raw.split(",") if n} if raw else None


def _managed(ctx: Context, vmi_key: str, uid: str) -> None:
    """The VMI no longer waits for adoption: adopted, complete, ended or gone."""
    seen_key = f"{vmi_key}/{uid}"
    memory = ctx.memory
    memory.unmanaged_since.pop(seen_key, None)
    memory.unadopted.discard(seen_key)
    ctx.unsay(f"adopt/{vmi_key}")


def _prune_unmanaged(ctx: Context) -> None:
    """On a resync sweep, forget VMIs that are gone without being seen to end: this costs
    the unmanaged VMIs, which the sweep decides about anyway (none of them is clean)."""
    vmis = ctx.world.vmis
    for seen_key in list(ctx.memory.unmanaged_since):
        vmi_key, _, uid = seen_key.rpartition("/")
        vmi = vmis.get(vmi_key)
        if vmi is None or vmi.metadata.uid != uid or not vmi.live:
            _managed(ctx, vmi_key, uid)


def _detach_ended(ctx: Context) -> None:
    world = ctx.world
    # Per device, the device and VMI objects last seen in use: unchanged, still in use.
    seen = ctx.memory.verdicts("detach")
    by_name, vmis = world.devices.by_name, world.vmis
    for name in ctx.scope.devices_of_interest(world, world.devices.attached, seen):
        d = by_name[name]
        cached = seen.get(name)
        # Checked before reading the device: a sweep over thousands of attachments that
        # did not change must not walk every one of them.
        if isinstance(cached, tuple) and cached[0] is d and vmis.get(cached[1]) is cached[2]:
            continue
        att = d.status.attachment
        assert att is not None
        vmi = vmis.get(att.vmi.key)
        if vmi is not None and vmi.live and vmi.metadata.uid == att.vmi.uid:
            seen[name] = (d, att.vmi.key, vmi)
            continue
        seen.forget(name)
        ended = world.vmi_ended_at(att.vmi.key, att.vmi.uid) or ctx.now
        phase = d.status.phase
        if phase == Phase.ATTACHED:
            phase = Phase.BOUND if d.status.binding is not None else Phase.CLEANING
        status = d.status.model_copy(
            update={"attachment": None, "phase": phase, "detached_at": ended}
        )
        ctx.plan.device_status(d.model_copy(update={"status": status}), placement=True)


def _since(ctx: Context, vmi: VirtualMachineInstance, d: GPUDevice) -> datetime:
    """When the VMI began to hold the device: when its launcher pod got the node
    (Scheduled), so an attachment noticed late — after a failover or an outage — is billed
    from then; never before the device's last detach (one interval at a time), nor
    after now."""
    since = vmi.started_at or ctx.now
    detached = d.status.detached_at
    if detached is not None and detached > since:
        since = detached
    return min(since, ctx.now)


def _attach(ctx: Context, vmi: VirtualMachineInstance) -> bool:
    """Attach the VMI's devices; False while it waits for adoption (a clock matters)."""
    world = ctx.world
    key = vm_key_of_vmi(vmi)
    order = world.order_of(key)
    if not order:
        _managed(ctx, vmi.key, vmi.metadata.uid)  # it orders no GPUs (any more)
        return True
    admitted = vmi_devices(vmi)
    mine = [
        d
        for d in world.devices.set_of(key)
        if d.spec.node_name == vmi.node_name and (admitted is None or d.metadata.name in admitted)
    ]
    ref = ObjectRef(namespace=vmi.metadata.namespace, name=vmi.metadata.name, uid=vmi.metadata.uid)
    for d in mine:
        att = d.status.attachment
        if att is not None and att.vmi.uid == ref.uid:
            continue
        phase = d.status.phase if d.status.phase == Phase.LOST else Phase.ATTACHED
        status = d.status.model_copy(
            update={"attachment": Attachment(vmi=ref, since=_since(ctx, vmi, d)), "phase": phase}
        )
        ctx.plan.device_status(d.model_copy(update={"status": status}), placement=True)
    have: dict[str, int] = {}
    for d in mine:
        have[d.status.class_name] = have.get(d.status.class_name, 0) + 1
    missing = {c: n - have.get(c, 0) for c, n in order.items() if n > have.get(c, 0)}
    seen_key = f"{vmi.key}/{vmi.metadata.uid}"
    if not missing:
        _managed(ctx, vmi.key, vmi.metadata.uid)
        return True
    first = ctx.memory.unmanaged_since.setdefault(seen_key, ctx.now)
    if ctx.now - first < ctx.config.attachment_grace:
        return False  # a bind request may still be in flight for it
    _adopt(ctx, vmi, key, missing, ref)
    return False


def _adopt(
    ctx: Context,
    vmi: VirtualMachineInstance,
    key: str,
    missing: dict[str, int],
    ref: ObjectRef,
) -> None:
    """Bind free devices on the VMI's node to its VM; never touch the VMI itself."""
    devices = ctx.world.devices
    chosen: list[GPUDevice] = []
    for class_name, count in missing.items():
        free = sorted(devices.free_on(class_name, vmi.node_name))
        if len(free) < count:
            ctx.say(
                f"adopt/{vmi.key}",
                ops.vm_note(
                    ctx,
                    key,
                    "GPUUnmanaged",
                    f"VMI {vmi.metadata.name} runs on {vmi.node_name} with {count} × "
                    f"{class_name} not bound to it, and the node has only {len(free)} free",
                    warning=True,
                ),
            )
            ctx.memory.unadopted.add(f"{vmi.key}/{vmi.metadata.uid}")  # the metric counts it
            return
        chosen.extend(devices.by_name[n] for n in free[:count])
    for d in chosen:
        new = ops.bind(
            ctx,
            d,
            key,
            BindReason.ADOPTED,
            f"VMI {vmi.metadata.name} was already running on {vmi.node_name}",
        )
        status = new.status.model_copy(
            update={
                "attachment": Attachment(vmi=ref, since=_since(ctx, vmi, d)),
                "phase": Phase.ATTACHED,
            }
        )
        ctx.plan.device_status(new.model_copy(update={"status": status}), placement=True)
    _managed(ctx, vmi.key, vmi.metadata.uid)
