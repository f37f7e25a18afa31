"""Release of deleted devices: a deleted device goes once no live VMI runs on it."""

from __future__ import annotations

from gpu_binder.api.types import FINALIZER, GPUDevice, Phase
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.binder.intervals import in_use, reservation, reservation_recorded
from gpu_binder.binder.plan import Decision


def release_deleted(ctx: Context) -> None:
    devices = ctx.world.devices
    for name in sorted(devices.deleted):
        d = devices.by_name[name]
        if FINALIZER not in d.metadata.finalizers:
            continue
        if in_use(ctx.world, d):
            if d.status.phase != Phase.RELEASING:
                status = d.status.model_copy(update={"phase": Phase.RELEASING})
                vmi = d.status.attachment.vmi.name if d.status.attachment else ""
                note = ops.device_note(d, "GPUReleasing", f"deleted; waits for VMI {vmi} to end")
                ctx.plan.device_status(d.model_copy(update={"status": status}), note)
            continue
        if not _interval_recorded(ctx, d):
            continue
        finalizers = tuple(f for f in d.metadata.finalizers if f != FINALIZER)
        meta = d.metadata.model_copy(update={"finalizers": finalizers})
        ctx.plan.device_update(d.model_copy(update={"metadata": meta}))
        if d.status.binding is not None:
            ctx.plan.note(
                ops.decision_note(
                    ctx,
                    d.status.binding.vm.key,
                    "GPUReleased",
                    Decision("released", (name,), "", "the device was deleted"),
                )
            )


def _interval_recorded(ctx: Context, d: GPUDevice) -> bool:
    """Whether the device's removal would end only intervals with records. Its VMI's end
    begins a Reserved interval once the attachments step detached it, and the reserved
    step records that: both wait for a pass not cut short, and the removal waits for them
    (a disabled binder detaches nothing, and waits for no detach)."""
    if d.status.attachment is not None:
        return not ctx.config.enabled
    r = reservation(d, ctx.now)
    return r is None or reservation_recorded(ctx.world, d.metadata.name, r)
