"""The invariants of DESIGN §2, checked over the store as it changes.

The checker follows every write through the store's subscription hook, so transitions
(3, 4, 6, 8, 11) are judged on each device version in write order, not on snapshots that
could hide a step in between; `check()` then judges the state (1, 2, 6, 8, 9) of what
changed since the last check only, so running it after every event costs what the event
changed. Invariant 5 is structural (only the binder writes status.binding), 7 is
`quiet_pass`, 9 and 9b (an Attached device is one its VMI runs with) are sim.podcheck's,
11 is sim.recordcheck's, 12 (the ledger against the sim's own truth of GPU time)
sim.ledgercheck's, judged once at the end of a run (sim.command).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpu_binder.api.kinds import Event
from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.meta import utc
from gpu_binder.api.slots import format_slot
from gpu_binder.api.types import (
    DEVICES_ANNOTATION,
    USAGE_FINALIZER,
    GPUClass,
    GPUDevice,
    GPUUsageRecord,
    ObjectRef,
    Phase,
    is_copy,
)
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.podcheck import PodChecker
from gpu_binder.sim.recordcheck import RecordChecker

Interval = tuple[str, str]  # (VMI uid, device)


def order_key(vmi: VirtualMachineInstance) -> str:
    """The order a VMI runs for: its VM, or itself when it has none."""
    return f"{vmi.metadata.namespace}/{vmi.vm_name or vmi.metadata.name}"


def _same_owner(a: ObjectRef, b: ObjectRef) -> bool:
    return a.key == b.key and (not a.uid or not b.uid or a.uid == b.uid)


@dataclass(slots=True)
class _Track:
    """A device's history for invariant 4: its last VM and its cleaning since release."""

    owner: ObjectRef | None = None
    released_at: datetime | None = None
    cleaning_seen: bool = False
    # The agent wrote a reset after the release (judged in write order: its lastReset is
    # by the node's clock, which may be behind the binder's releasedAt).
    reset_seen: bool = False


@dataclass(slots=True)
class _Open:
    vmi_key: str
    closed: bool = False
    # The VMI's finish time when the interval closed, if the VMI had one then.
    finished_at: datetime | None = None


class InvariantChecker:
    """Follows the store from its construction on; call check() after every event."""

    def __init__(self, client: MemoryClient) -> None:
        self.client = client
        self.violations: list[str] = []
        self._pending: list[str] = []
        self._devices: dict[str, GPUDevice] = {}
        self._classes: dict[str, GPUClass] = {}
        self._vmis: dict[str, VirtualMachineInstance] = {}
        self._finished: dict[str, datetime] = {}
        # By uid, the true time a VMI ended: the write that made it Succeeded/Failed or
        # removed it, on the store's clock.
        self._ended: dict[str, datetime] = {}
        self._slots: dict[tuple[str, str], str] = {}
        self._uses: dict[str, set[str]] = {}
        self._used_by: dict[str, str] = {}
        self._by_vm: dict[str, set[str]] = defaultdict(set)
        self._tracks: dict[str, _Track] = {}
        self._records: dict[Interval, set[str]] = defaultdict(set)
        self._record_objs: dict[str, GPUUsageRecord] = {}
        # Open records by VMI uid: a VMI the usage finalizer holds goes only once it has none.
        self._open_by_uid: dict[str, set[str]] = defaultdict(set)
        self._intervals: dict[Interval, _Open] = {}
        # Intervals opened or closed since the last check of records.
        self._unverified: set[Interval] = set()
        self._seq = 0
        self._last_event: dict[str, int] = {}
        self._changes: list[tuple[int, str, str, str]] = []
        self._dirty_devices: set[str] = set()
        self._dirty_vms: set[str] = set()
        for cls in client.objects(GPUClass):
            self._classes[cls.metadata.name] = cls
        for d in client.objects(GPUDevice):
            self._seed_device(d)
        for vmi in client.objects(VirtualMachineInstance):
            self._on_vmi(vmi, deleted=False)
        for r in client.objects(GPUUsageRecord):
            self._on_record(r, deleted=False)
        client.subscribe(self._on_event)
        self.pods = PodChecker(client)
        self.records = RecordChecker(client, client.clock)

    # --- the checks -----------------------------------------------------------------------

    def check(self, *, records: bool = True) -> list[str]:
        """Violations found since the last check; `records=False` while the binder is down
        leaves usage records unjudged until a later check."""
        out = self._pending
        self._pending = []
        for name in sorted(self._dirty_devices):
            d = self._devices.get(name)
            if d is not None:
                out.extend(self._attachment_belongs(d))
        for vm in sorted(self._dirty_vms):
            out.extend(self._one_node(vm))
        self._dirty_devices.clear()
        self._dirty_vms.clear()
        out.extend(self._events_for_changes())
        out.extend(self.pods.check())
        if records:
            out.extend(self._usage_records())
            out.extend(self.records.check())
        self.violations.extend(out)
        return out

    def check_all(self) -> list[str]:
        """check(), then invariants 1 and 2 over every device and VM (O(devices))."""
        self._dirty_devices.update(self._devices)
        self._dirty_vms.update(self._by_vm)
        return self.check()

    def observe_event(self, namespace: str, name: str) -> None:
        """An Event about an object, for binders that record Events outside the store."""
        self._seq += 1
        self._last_event[f"{namespace}/{name}"] = self._seq

    def _attachment_belongs(self, d: GPUDevice) -> list[str]:
        """(1) An Attached device's VMI belongs to the VM the device is bound to."""
        att, binding = d.status.attachment, d.status.binding
        if att is None:
            return []
        if binding is None:
            return [f"(1) {d.name} is attached to VMI {att.vmi.key} but bound to no VM"]
        vmi = self._vmis.get(att.vmi.key)
        order = order_key(vmi) if vmi is not None else att.vmi.key
        if order != binding.vm.key:
            return [
                f"(1) {d.name} is attached to VMI {att.vmi.key} of {order} "
                f"but bound to {binding.vm.key}"
            ]
        return []

    def _one_node(self, vm: str) -> list[str]:
        """(2) A VM's devices are on one node, but for those a live VMI still runs on."""
        names = self._by_vm.get(vm, set())
        nodes = {
            self._devices[n].spec.node_name
            for n in names
            if n in self._devices and n not in self._used_by
        }
        if len(nodes) > 1:
            return [f"(2) {vm} holds devices on {len(nodes)} nodes: {', '.join(sorted(nodes))}"]
        return []

    def _events_for_changes(self) -> list[str]:
        """(8) Every change of a device's binding has an Event on the device or a VM."""
        out = []
        for seq, device, old, new in self._changes:
            keys = {f"/{device}", old, new} - {""}
            if not any(self._last_event.get(k, 0) > seq for k in keys):
                out.append(f"(8) {device}: binding {old or 'none'} -> {new or 'none'} has no Event")
        self._changes.clear()
        return out

    def _usage_records(self) -> list[str]:
        """(6) Every attachment interval has exactly one record, closed with the finish time."""
        out = []
        for interval in sorted(self._unverified):
            iv = self._intervals[interval]
            uid, device = interval
            names = self._records.get(interval, set())
            what = f"the attachment of {device} to VMI {iv.vmi_key} ({uid[:8]})"
            if not names:
                out.append(f"(6) {what} has no usage record")
            elif len(names) > 1:
                out.append(f"(6) {what} has {len(names)} usage records")
            elif iv.closed:
                r = self._record_objs[next(iter(names))]
                # The finish time the VMI reported, by the close or since (a record closed
                # later must still carry it): only a VMI that never reported one is unjudged.
                finished = iv.finished_at or self._finished.get(uid)
                if r.spec.end is None:
                    out.append(f"(6) {what} ended but its record is still open")
                elif finished is not None and utc(r.spec.end) not in self._finish_times(
                    r, finished
                ):
                    out.append(
                        f"(6) {what} ended at {finished.isoformat()} but its "
                        f"record says {r.spec.end.isoformat()}"
                    )
            if iv.closed:
                del self._intervals[interval]
        self._unverified.clear()
        return out

    def _finish_times(self, r: GPUUsageRecord, finished: datetime) -> set[datetime]:
        """The ends a record of a VMI that finished then may carry: the finish time (never
        before the record's start), or that clamped to the binder's now at the close when
        the VMI's clock was ahead of it (invariant 11), or the true time the VMI ended
        when its finish says earlier (a binder that saw it end knows it ended no sooner:
        World.seen_running)."""
        start, finished = utc(r.spec.start), utc(finished)
        closed = self.records.closed_at.get(f"{r.metadata.namespace}/{r.metadata.name}")
        ends = {max(start, finished)}
        if closed is not None:
            ends.add(max(start, min(finished, closed)))
        ended = self._ended.get(r.spec.vmi.uid if r.spec.vmi else "")
        if ended is not None and ended > finished:
            ends.add(max(start, ended))
        return ends

    # --- following the store --------------------------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        deleted = event.type == "DELETED"
        if kind is GPUDevice:
            self._on_device(event.object, deleted)
        elif kind is VirtualMachineInstance:
            self._on_vmi(event.object, deleted)
        elif kind is GPUUsageRecord:
            self._on_record(event.object, deleted)
        elif kind is Event and event.type == "ADDED":
            regarding = event.object.regarding
            self.observe_event(regarding.get("namespace", ""), regarding.get("name", ""))
        elif kind is GPUClass:
            if deleted:
                self._classes.pop(event.object.metadata.name, None)
            else:
                self._classes[event.object.metadata.name] = event.object

    def _seed_device(self, d: GPUDevice) -> None:
        self._devices[d.name] = d
        b = d.status.binding
        self._tracks[d.name] = _Track(owner=b.vm if b else None)
        if b is not None:
            self._by_vm[b.vm.key].add(d.name)
        if d.spec.slot is not None:
            self._slots[(d.spec.node_name, _slot(d))] = d.name

    def _on_device(self, d: GPUDevice, deleted: bool) -> None:
        name = d.name
        prev = self._devices.get(name)
        old = prev.status.binding.vm if prev is not None and prev.status.binding else None
        new = None if deleted else (d.status.binding.vm if d.status.binding else None)
        user = self._used_by.get(name)
        if deleted:
            if user is not None:
                self._pending.append(f"(3) {name} was deleted while VMI {user} runs on it")
            self._devices.pop(name, None)
            self._tracks.pop(name, None)
            if self._slots.get((d.spec.node_name, _slot(d))) == name:
                del self._slots[(d.spec.node_name, _slot(d))]
        else:
            self._devices[name] = d
            if d.spec.slot is not None:
                self._slots[(d.spec.node_name, _slot(d))] = name
            if user is not None:
                self._undisturbed(prev, d, old, new, user)
            self._cleaned_before_reuse(prev, d, old, new)
            self._follow_attachment(prev, d)
        if (old.key if old else "") != (new.key if new else ""):
            self._seq += 1
            self._changes.append((self._seq, name, old.key if old else "", new.key if new else ""))
            if old is not None:
                self._by_vm[old.key].discard(name)
                self._dirty_vms.add(old.key)
            if new is not None:
                self._by_vm[new.key].add(name)
                self._dirty_vms.add(new.key)
        self._dirty_devices.add(name)

    def _undisturbed(
        self,
        prev: GPUDevice | None,
        d: GPUDevice,
        old: ObjectRef | None,
        new: ObjectRef | None,
        user: str,
    ) -> None:
        """(3) A device a running VMI uses keeps its binding to that VMI's VM, uncleaned."""
        vmi = self._vmis[user]
        mine = order_key(vmi)
        if (old.key if old else "") != (new.key if new else "") and (
            new is None or new.key != mine
        ):
            self._pending.append(
                f"(3) {d.name} went from {old.key if old else 'none'} to "
                f"{new.key if new else 'none'} while VMI {user} runs on it"
            )
        phase = d.status.phase
        if phase in (Phase.CLEANING, Phase.AVAILABLE) and (
            prev is None or prev.status.phase != phase
        ):
            self._pending.append(f"(3) {d.name} went {phase} while VMI {user} runs on it")

    def _cleaned_before_reuse(
        self,
        prev: GPUDevice | None,
        d: GPUDevice,
        old: ObjectRef | None,
        new: ObjectRef | None,
    ) -> None:
        """(4) A device reaches a new VM only after a reset that followed its release."""
        track = self._tracks.setdefault(d.name, _Track(owner=old))
        if d.status.phase == Phase.CLEANING:
            track.cleaning_seen = True
        if (
            track.released_at is not None
            and prev is not None
            and d.spec.last_reset != prev.spec.last_reset
        ):
            track.reset_seen = True
        if new is None:
            released = d.status.released_at
            if old is not None:
                track.released_at = released
                track.cleaning_seen = d.status.phase == Phase.CLEANING
                track.reset_seen = False
            elif released is not None and (
                track.released_at is None or utc(released) > utc(track.released_at)
            ):
                # Released again while free (a recovered Lost device): the reset must follow.
                track.released_at = released
                track.reset_seen = False
            return
        if old is not None and _same_owner(old, new):
            return
        cls = self._classes.get(d.status.class_name)
        must_clean = cls is None or cls.spec.cleaning == "Reset"
        if must_clean and old is not None:
            self._pending.append(
                f"(4) {d.name} went from {old.key} to {new.key} without being released"
            )
        elif must_clean and track.owner is not None and not _same_owner(track.owner, new):
            released, echoed = track.released_at, d.spec.last_reset_for
            # A reset the agent wrote after the release, or its echo of the release it
            # cleaned for: never the two clocks compared (the node's may be behind).
            cleaned = (
                track.cleaning_seen
                and released is not None
                and (track.reset_seen or (echoed is not None and utc(echoed) == utc(released)))
            )
            if not cleaned:
                self._pending.append(
                    f"(4) {d.name} went from {track.owner.key} to {new.key} without a "
                    "Cleaning that ended in a reset after its release"
                )
        track.owner, track.released_at, track.cleaning_seen = new, None, False
        track.reset_seen = False

    def _follow_attachment(self, prev: GPUDevice | None, d: GPUDevice) -> None:
        before = prev.status.attachment if prev is not None else None
        after = d.status.attachment
        if before is not None and (after is None or after.vmi.uid != before.vmi.uid):
            iv = self._intervals.setdefault((before.vmi.uid, d.name), _Open(before.vmi.key))
            iv.closed = True
            iv.finished_at = self._finished.get(before.vmi.uid)
            self._unverified.add((before.vmi.uid, d.name))
        if after is not None and (before is None or after.vmi.uid != before.vmi.uid):
            self._intervals[(after.vmi.uid, d.name)] = _Open(after.vmi.key)
            self._unverified.add((after.vmi.uid, d.name))

    def _on_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        key = vmi.key
        for name in self._uses.pop(key, set()):
            if self._used_by.get(name) == key:
                del self._used_by[name]
                self._dirty_devices.add(name)
        self._dirty_vms.add(order_key(vmi))
        if vmi.finish is not None:
            self._finished[vmi.metadata.uid] = vmi.finish
        if deleted or not vmi.live:
            self._ended.setdefault(vmi.metadata.uid, utc(self.client.clock()))
        if deleted:
            held = self._vmis.pop(key, None)
            if held is not None and USAGE_FINALIZER in held.metadata.finalizers:
                self._went_with_records_closed(held)
            return
        self._vmis[key] = vmi
        # Judged on the phase alone: a VMI being deleted (deletionTimestamp set) still runs,
        # its guest shutting down on the devices, until it is Succeeded/Failed or gone.
        if vmi.phase != "Running" or not vmi.node_name:
            return
        uses = self._devices_of(vmi)
        self._uses[key] = uses
        for name in uses:
            other = self._used_by.get(name)
            if other is not None and other != key:
                self._pending.append(f"(1) {name} is used by VMIs {other} and {key} at once")
            self._used_by[name] = key

    def _went_with_records_closed(self, vmi: VirtualMachineInstance) -> None:
        """(6) A VMI the usage finalizer held goes only once its records are closed: with
        it goes its finish time, which a binder coming back would close them with."""
        still = sorted(self._open_by_uid.get(vmi.metadata.uid, ()))
        if still:
            self._pending.append(
                f"(6) VMI {vmi.key} ({vmi.metadata.uid[:8]}) went while its usage "
                f"record(s) {', '.join(still)} were open"
            )

    def _devices_of(self, vmi: VirtualMachineInstance) -> set[str]:
        """The devices a running VMI holds: those its slot resources and annotation name."""
        node = vmi.node_name
        out = {n for r in vmi.device_names if (n := self._slots.get((node, r))) is not None}
        listed = vmi.metadata.annotations.get(DEVICES_ANNOTATION, "")
        for name in filter(None, listed.split(",")):
            d = self._devices.get(name)
            if d is None or d.spec.node_name == node:
                out.add(name)
        return out

    def _on_record(self, r: GPUUsageRecord, deleted: bool) -> None:
        if is_copy(r) or r.spec.vmi is None:
            return  # a tenant's copy, or a Reserved record: (6) judges attachments' records
        key = f"{r.metadata.namespace}/{r.metadata.name}"
        vmi_uid = r.spec.vmi.uid
        interval = (vmi_uid, r.spec.device)
        prev = self._record_objs.get(key)
        if prev is not None and prev.spec.end is not None and (deleted or prev.spec != r.spec):
            self._pending.append(f"(6) closed usage record {key} was changed or deleted")
        open_of = self._open_by_uid[vmi_uid]
        if deleted or r.spec.end is not None:
            open_of.discard(key)
            if not open_of:
                del self._open_by_uid[vmi_uid]
        else:
            open_of.add(key)
        if deleted:
            self._record_objs.pop(key, None)
            self._records[interval].discard(key)
            return
        self._record_objs[key] = r
        self._records[interval].add(key)


def _slot(d: GPUDevice) -> str:
    return format_slot(d.spec.vendor_id, d.spec.device_id, d.spec.slot or 0)


async def quiet_pass(client: MemoryClient, run_pass: Callable[[], Awaitable[object]]) -> list[str]:
    """(7) A pass over an unchanged world writes nothing: run one and count its writes."""
    before = client.writes
    await run_pass()
    writes = client.writes - before
    return [f"(7) a pass over an unchanged world made {writes} write(s)"] if writes else []
