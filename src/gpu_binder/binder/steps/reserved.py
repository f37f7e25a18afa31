"""Reserved records: one per interval a device is bound to an order with no VMI on it,
beside the Attached records and with their guarantees (binder.intervals says when an
interval begins and ends; binder.ledger where its record lives).

A stopped VM's GPUs cost the provider as much as used ones, so the ledger bills them too.
The record's name is derived from its owner, device and start (api.types
reserved_record_name), which every binder reads alike from the device's status: opening
it twice, after a restart or a failover, is one record. Runs even when disabled.
"""

from __future__ import annotations

from gpu_binder.api.types import RecordKind, reserved_record_name
from gpu_binder.binder import ledger
from gpu_binder.binder.context import Context
from gpu_binder.binder.intervals import reservation, reservation_recorded, reserved_end
from gpu_binder.binder.writes import OpenRecord, Update


def reserved_records(ctx: Context) -> None:
    """Open the records of reservations that have none, then close those that ended."""
    open_reserved(ctx)
    _close_ended(ctx)


def open_reserved(ctx: Context) -> None:
    """Open the record of each reservation that has none (Reserved records of its own are
    the only writes it makes, so a pass may run it before a step that ends reservations)."""
    world = ctx.world
    book = ctx.config.ledger_namespace
    scope = ctx.scope.events_only()
    opened = ctx.memory.verdicts("reserved-open")
    for name in scope.devices_of_interest(world, world.devices.reserved):
        d = world.devices.by_name[name]
        if opened.get(name) is d:
            continue
        r = reservation(d, ctx.now)
        if r is None:
            continue
        taken = ctx.memory.closed_records.get((name, RecordKind.RESERVED))
        if reservation_recorded(world, name, r) or (
            taken is not None and taken == (book, reserved_record_name(r.owner, name, r.start))
        ):
            opened[name] = d
            continue
        # Created with its copy, under the next name of its sequence when an interval that
        # began at the same instant took the name; found closed, it is not opened again.
        found = ledger.remember_closed(ctx.memory.closed_records)
        ctx.plan.write(OpenRecord(ledger.reserved(d, r, book), on_opened=found))


def _close_ended(ctx: Context) -> None:
    world = ctx.world
    book = ctx.config.ledger_namespace
    scope = ctx.scope.events_only()
    judged = ctx.memory.verdicts("reserved-close")
    # Records leave the cache as they close: their verdicts (which hold the record objects)
    # go with them once they could outnumber the open ones.
    judged.drop_gone(ctx.world.open_records)
    if scope.full:
        names = sorted(world.open_reserved)
    else:
        names = scope.devices_of_interest(world, world.open_reserved)
    for name in names:
        dev = world.devices.get(name)
        for key in sorted(world.open_reserved.get(name, ())):
            rec = world.records[key]
            copy = world.copies.get(rec.metadata.name)
            cached = judged.get(key)
            if (
                isinstance(cached, tuple)
                and cached[0] is rec
                and cached[1] is dev
                and cached[2] is copy
            ):
                continue
            end = reserved_end(ctx.now, rec, dev)
            if end is None:
                ledger.keep_copy(ctx.plan, world.copies, rec, book)
                judged[key] = (rec, dev, copy)
                continue
            ledger.stage(ctx.plan, Update(ledger.closed(rec, end)), book, copy)
