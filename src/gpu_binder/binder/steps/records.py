"""Usage records: one per attachment interval, opened and closed idempotently; and the
usage finalizer, which holds a VMI until its records are closed."""

from __future__ import annotations

from datetime import datetime

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    RECORD_CLOSED,
    RECORD_OPEN,
    RECORD_STATE_LABEL,
    USAGE_FINALIZER,
    GPUDevice,
    GPUUsageRecord,
    GPUUsageRecordSpec,
    VMRef,
    usage_record_name,
)
from gpu_binder.binder.context import Context
from gpu_binder.binder.steps.release import in_use

RECORD_LABEL_VM = "gpu.cozystack.io/vm"


def usage_records(ctx: Context) -> None:
    world = ctx.world
    scope = ctx.scope.events_only()
    # What was judged already, by object identity: an unchanged pair needs no new look.
    opened = ctx.memory.verdicts("records-open")
    judged = ctx.memory.verdicts("records-close")
    for name in scope.devices_of_interest(world, world.devices.attached):
        d = world.devices.by_name[name]
        att = d.status.attachment
        if att is None:
            continue
        vmi = world.vmis.get(att.vmi.key)
        cached = opened.get(name)
        if isinstance(cached, tuple) and cached[0] is d and cached[1] is vmi:
            continue
        if not in_use(ctx, d):
            continue
        rname = usage_record_name(att.vmi.uid, name)
        # Recorded: open in the cache, or found closed already (only open ones are cached;
        # see Reconciler._write) — an interval is never opened twice.
        if f"{att.vmi.namespace}/{rname}" in world.records or ctx.memory.closed_records.get(
            name
        ) == (att.vmi.namespace, rname):
            opened[name] = (d, vmi)
            continue
        ctx.plan.write("create", _open(d, rname))
    keys: list[str] = []
    if scope.full:
        keys = sorted(world.open_records)
    else:
        wanted: set[str] = set()
        for name in scope.devices_of_interest(world, world.open_by_device):
            wanted.update(world.open_by_device[name])
        # And those of VMIs the usage finalizer holds, whatever route their change took:
        # such a VMI goes only once they are closed.
        for vmi_key in world.usage_held:
            wanted.update(world.open_by_vmi.get(world.vmis[vmi_key].metadata.uid, ()))
        keys = sorted(wanted)
    for key in keys:
        rec = world.records[key]
        dev = world.devices.get(rec.spec.device)
        att = dev.status.attachment if dev is not None else None
        vmi = world.vmis.get(f"{rec.metadata.namespace}/{rec.spec.vmi.name}")
        cached = judged.get(key)
        if isinstance(cached, tuple) and cached[0] is rec and cached[1] is dev and cached[2] is vmi:
            continue
        # Judged on the VMI too, not the attachment alone: with the binder disabled nothing
        # clears the attachment of an ended VMI, and billing must stop when the VMI ends.
        if (
            dev is not None
            and att is not None
            and att.vmi.uid == rec.spec.vmi.uid
            and in_use(ctx, dev)
        ):
            judged[key] = (rec, dev, vmi)
            continue
        end = _clamped_end(ctx, rec, dev)
        spec = rec.spec.model_copy(update={"end": end})
        # Closed, it leaves the binder's selection (OPEN_RECORDS) in the same write.
        labels = {**rec.metadata.labels, RECORD_STATE_LABEL: RECORD_CLOSED}
        meta = rec.metadata.model_copy(update={"labels": labels})
        ctx.plan.write("update", rec.model_copy(update={"metadata": meta, "spec": spec}))


def _open(d: GPUDevice, rname: str) -> GPUUsageRecord:
    att, binding = d.status.attachment, d.status.binding
    assert att is not None
    vm = binding.vm.name if binding is not None else att.vmi.name
    labels = {RECORD_LABEL_VM: vm, RECORD_STATE_LABEL: RECORD_OPEN}
    return GPUUsageRecord(
        metadata=ObjectMeta(name=rname, namespace=att.vmi.namespace, labels=labels),
        spec=GPUUsageRecordSpec(
            vm=vm,
            vmi=VMRef(name=att.vmi.name, uid=att.vmi.uid),
            device=d.metadata.name,
            class_name=d.status.class_name,
            node_name=d.spec.node_name,
            start=att.since,
        ),
    )


def _clamped_end(ctx: Context, rec: GPUUsageRecord, d: GPUDevice | None) -> datetime:
    """The end a record closes with (DESIGN §2.11): the VMI's finish, stamped by its node's
    clock, clamped to the binder's now, to no earlier than the record's start, and to no
    later than the start of the device's next attachment, so one GPU is never billed
    twice for the same second."""
    end = min(_ended(ctx, rec, d), ctx.now)
    att = d.status.attachment if d is not None else None
    if att is not None and att.vmi.uid != rec.spec.vmi.uid:
        end = min(end, att.since)
    return max(end, rec.spec.start)


def _ended(ctx: Context, rec: GPUUsageRecord, d: GPUDevice | None) -> datetime:
    """The VMI's finish time when it is known, not the time the binder noticed."""
    key = f"{rec.metadata.namespace}/{rec.spec.vmi.name}"
    ended = ctx.world.vmi_ended_at(key, rec.spec.vmi.uid)
    if ended is not None:
        return ended
    if d is not None and d.status.attachment is None and d.status.detached_at is not None:
        return d.status.detached_at
    return ctx.now


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
            "finalizers", VirtualMachineInstance.from_dict({**vmi.raw, "metadata": meta.to_dict()})
        )


def _holds_devices(ctx: Context, vmi: VirtualMachineInstance) -> bool:
    """Whether a device is attached to this very VMI (by uid)."""
    uid = vmi.metadata.uid
    for d in ctx.world.devices.set_of(vmi.order_key):
        att = d.status.attachment
        if att is not None and att.vmi.uid == uid:
            return True
    return False
