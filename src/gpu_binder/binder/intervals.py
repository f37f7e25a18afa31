"""When the ledger's intervals begin and end: the one rule for the records steps, which
open and close records by it, and for the GPU-seconds counters, which count open records
up to the end it would give them now (binder.ledgertotals).

An Attached interval is a device in use by one VMI, from its attachment's `since` to the
VMI's finish. A Reserved interval is a device bound to an order with no VMI on it: from
its bind, or the end of its last attachment, to the next attachment's `since`, its
release, or a bind to another order. The two abut: a detach's time ends one and begins
the other, so a GPU held without a break is billed without a gap or an overlap.

Every time is clamped (DESIGN §2.11): never after the binder's now, never before the
interval began, and an Attached interval never past the start of its device's next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpu_binder.api.types import Binding, GPUDevice, GPUUsageRecord
from gpu_binder.cache.world import World


def in_use(world: World, d: GPUDevice) -> bool:
    """Whether the VMI of the device's attachment still runs on it (by uid), judged on the
    attachment alone, so it holds even when placement failed or is off. A VMI being
    deleted still uses the device until it ends (see VirtualMachineInstance.live)."""
    att = d.status.attachment
    if att is None:
        return False
    vmi = world.vmis.get(att.vmi.key)
    return vmi is not None and vmi.live and vmi.metadata.uid == att.vmi.uid


# --- Attached -----------------------------------------------------------------------------


def attached_open(world: World, rec: GPUUsageRecord, d: GPUDevice | None) -> bool:
    """Whether an open Attached record's interval goes on: its device is still attached
    to its VMI, and that VMI still runs. Judged on the VMI too, not the attachment alone:
    with the binder disabled nothing clears the attachment of an ended VMI, and billing
    must stop when the VMI ends."""
    vmi = rec.spec.vmi
    if d is None or vmi is None:
        return False
    att = d.status.attachment
    return att is not None and att.vmi.uid == vmi.uid and in_use(world, d)


def attached_end(world: World, now: datetime, rec: GPUUsageRecord, d: GPUDevice | None) -> datetime:
    """The end an Attached record closes with: the VMI's finish, stamped by its node's
    clock, clamped to the binder's now, to no earlier than the record's start, and to no
    later than the start of the device's next attachment, so one GPU is never billed
    twice for the same second."""
    end = min(_finished(world, now, rec, d), now)
    att = d.status.attachment if d is not None else None
    vmi = rec.spec.vmi
    if att is not None and vmi is not None and att.vmi.uid != vmi.uid:
        end = min(end, att.since)
    return max(end, rec.spec.start)


def _finished(world: World, now: datetime, rec: GPUUsageRecord, d: GPUDevice | None) -> datetime:
    """The VMI's finish time when it is known, not the time the binder noticed."""
    vmi = rec.spec.vmi
    if vmi is not None:
        ended = world.vmi_ended_at(f"{rec.tenant}/{vmi.name}", vmi.uid)
        if ended is not None:
            return ended
    if d is not None and d.status.attachment is None and d.status.detached_at is not None:
        return d.status.detached_at
    return now


# --- Reserved -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """The Reserved interval a device is in now: bound, with no VMI on it."""

    binding: Binding
    start: datetime

    @property
    def owner(self) -> str:
        """Whom it is reserved for, as its record's name says it: the VM's uid, else its
        key (a standalone VMI's set is bound before the VMI has a uid)."""
        return self.binding.vm.uid or self.binding.vm.key


def reservation(d: GPUDevice, now: datetime) -> Reservation | None:
    """The device's Reserved interval, or None when it is attached or bound to no one.

    It began at the bind, or at the end of the device's last attachment if that came
    later (detached_at; a bind clears it), never after now."""
    s = d.status
    b = s.binding
    if b is None or s.attachment is not None:
        return None
    start = b.bound_at
    if s.detached_at is not None and s.detached_at > start:
        start = s.detached_at
    return Reservation(b, min(start, now))


def reservation_recorded(world: World, device: str, r: Reservation) -> bool:
    """Whether the device's Reserved interval has its open record: one of its owner with
    its start, whatever its name (ledgerwrites.open_record)."""
    for key in world.open_reserved.get(device, ()):
        spec = world.records[key].spec
        if spec.start == r.start and (spec.vm_uid or f"{spec.namespace}/{spec.vm}") == r.owner:
            return True
    return False


def reserved_end(now: datetime, rec: GPUUsageRecord, d: GPUDevice | None) -> datetime | None:
    """The end an open Reserved record closes with now, or None while it goes on.

    It ends when its device gets an attachment (its `since`), is released (releasedAt),
    is bound to another order (that bind), a new interval of the device began unseen
    (that interval's start), or the device is gone (now). Clamped to [start, now]."""
    start = rec.spec.start
    if d is None:
        return max(start, now)
    s = d.status
    b = s.binding
    if b is None:
        end = s.released_at or now
    elif not _same_owner(rec, b):
        end = b.bound_at  # released and bound to another order in one pass
    elif s.attachment is not None:
        end = s.attachment.since
    else:
        current = reservation(d, now)
        if current is not None and current.start == start:
            return None
        end = current.start if current is not None else now
    return max(start, min(end, now))


def _same_owner(rec: GPUUsageRecord, b: Binding) -> bool:
    if b.vm.namespace != rec.tenant or b.vm.name != rec.spec.vm:
        return False
    # A set bound before its order had a uid takes it at its first attachment; uids
    # differ only for another object of the name.
    return not b.vm.uid or not rec.spec.vm_uid or b.vm.uid == rec.spec.vm_uid
