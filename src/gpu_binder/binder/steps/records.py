"""Usage records of attachments: one per attachment interval, opened and closed
idempotently in the ledger (binder.ledger) with the tenant's copy beside; copies whose
record closed without them are closed from the ledger; and the usage finalizer, which
holds a VMI until its records are closed. Reserved intervals are steps.reserved's."""

from __future__ import annotations

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import USAGE_FINALIZER, RecordKind, usage_record_name
from gpu_binder.binder import ledger
from gpu_binder.binder.context import Context
from gpu_binder.binder.intervals import attached_end, attached_open, in_use
from gpu_binder.binder.writes import Create, Finalizers, SyncCopy, Update


def usage_records(ctx: Context) -> None:
    world = ctx.world
    book = ctx.config.ledger_namespace
    scope = ctx.scope.events_only()
    # What was judged already, by object identity: an unchanged pair needs no new look.
    opened = ctx.memory.verdicts("records-open")
    judged = ctx.memory.verdicts("records-close")
    # Records leave the cache as they close: their verdicts (which hold the record objects)
    # go with them once they could outnumber the open ones.
    judged.drop_gone(ctx.world.open_records)
    found_closed = ledger.remember_closed(ctx.memory.closed_records)
    for name in scope.devices_of_interest(world, world.devices.attached):
        d = world.devices.by_name[name]
        att = d.status.attachment
        if att is None:
            continue
        vmi = world.vmis.get(att.vmi.key)
        cached = opened.get(name)
        if isinstance(cached, tuple) and cached[0] is d and cached[1] is vmi:
            continue
        if not in_use(world, d):
            continue
        rname = usage_record_name(att.vmi.uid, name)
        # Recorded: open in the cache, or found closed already (only open ones are cached;
        # the create remembers one it finds closed) — an interval is never opened twice.
        if f"{book}/{rname}" in world.records or ctx.memory.closed_records.get(
            (name, RecordKind.ATTACHED)
        ) == (book, rname):
            opened[name] = (d, vmi)
            continue
        create = Create(ledger.attached(d, book), on_exists=found_closed)
        ledger.stage(ctx.plan, create, book, world.copies.get(rname))
    keys: list[str] = []
    if scope.full:
        keys = sorted(
            k for k in world.open_records if world.records[k].spec.kind == RecordKind.ATTACHED
        )
    else:
        wanted: set[str] = set()
        for name in scope.devices_of_interest(world, world.open_attached):
            wanted.update(world.open_attached[name])
        # And those of VMIs the usage finalizer holds, whatever route their change took:
        # such a VMI goes only once they are closed.
        for vmi_key in world.usage_held:
            wanted.update(world.open_by_vmi.get(world.vmis[vmi_key].metadata.uid, ()))
        keys = sorted(wanted)
    for key in keys:
        rec = world.records[key]
        dev = world.devices.get(rec.spec.device)
        vmi = world.vmis.get(f"{rec.tenant}/{rec.spec.vmi.name}") if rec.spec.vmi else None
        copy = world.copies.get(rec.metadata.name)
        cached = judged.get(key)
        if (
            isinstance(cached, tuple)
            and cached[0] is rec
            and cached[1] is dev
            and cached[2] is vmi
            and cached[3] is copy
        ):
            continue
        if attached_open(world, rec, dev):
            ledger.keep_copy(ctx.plan, world.copies, rec, book)
            judged[key] = (rec, dev, vmi, copy)
            continue
        end = attached_end(world, ctx.now, rec, dev)
        ledger.stage(ctx.plan, Update(ledger.closed(rec, end)), book, copy)
    close_orphan_copies(ctx)


def close_orphan_copies(ctx: Context) -> None:
    """An open copy whose record is not open any more (its close was written, the
    copy's failed) is written as the ledger says: the reconciler reads the record for it
    (SyncCopy), since closed records are not cached. A copy tried is not tried again
    while it stays the same object."""
    tried = ctx.memory.orphans_tried
    for name in [n for n in tried if n not in ctx.world.orphan_copies]:
        del tried[name]
    for name in sorted(ctx.world.orphan_copies):
        copy = ctx.world.copies[name]
        if tried.get(name) is not copy:
            ctx.plan.write(SyncCopy(copy, on_tried=lambda c: tried.update({c.metadata.name: c})))


def usage_finalizers(ctx: Context) -> None:
    """Remove the usage finalizer from VMIs whose GPU use is over once their records are
    closed (after usage_records, whose closes are written through by then).

    The webhook adds it to every VMI it admits with GPUs, so a VMI that ends and is
    deleted while no binder runs (an outage, a leader failover) stays, with its finish
    time, until a binder closes its records with that time (DESIGN §2.6). A VMI being
    deleted keeps it while it runs; one deleted before it ever got a node, and so holds
    no devices, loses it at once. Looks only at world.usage_held, which VMIs enter by an
    event and leave by this write: a pass costs what changed. Runs even when disabled.
    """
    world = ctx.world
    for key in sorted(world.usage_held):
        vmi = world.vmis[key]
        uid = vmi.metadata.uid
        if world.open_by_vmi.get(uid):
            continue  # closed by usage_records first; an aborted close is retried
        if vmi.live and _holds_devices(ctx, vmi):
            continue
        finalizers = tuple(f for f in vmi.metadata.finalizers if f != USAGE_FINALIZER)
        meta = vmi.metadata.model_copy(update={"finalizers": finalizers})
        ctx.plan.write(
            Finalizers(VirtualMachineInstance.from_dict({**vmi.raw, "metadata": meta.to_dict()}))
        )


def _holds_devices(ctx: Context, vmi: VirtualMachineInstance) -> bool:
    """Whether a device is attached to this very VMI (by uid)."""
    uid = vmi.metadata.uid
    for d in ctx.world.devices.set_of(vmi.order_key):
        att = d.status.attachment
        if att is not None and att.vmi.uid == uid:
            return True
    return False
