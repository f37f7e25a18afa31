"""The writes a step decided, staged in the world so later decisions see them.

A step is pure of I/O: it reads the world and stages writes here. The reconciler then
makes them; a write that fails un-stages itself and the writes after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from gpu_binder.api.types import GPUDevice, GPUUsageRecord, is_copy
from gpu_binder.binder.writes import Create, OpenRecord, Status, Update, WriteOp, target
from gpu_binder.cache.world import World


@dataclass(frozen=True, slots=True)
class Decision:
    """A bind or a release, as facts: what was bound or released, where, and why. The
    Events of one pass's decisions are merged by these (binder.events.merge), not by
    reading their words back."""

    verb: Literal["bound", "released"]
    devices: tuple[str, ...]
    node: str  # where it was bound; "" for a release
    why: str

    def render(self) -> str:
        names = self.devices
        what = names[0] if len(names) == 1 else f"{len(names)} GPUs ({', '.join(names)})"
        on = f" on {self.node}" if self.node else ""
        return f"{self.verb} {what}{on}: {self.why}"


@dataclass(frozen=True, slots=True)
class Note:
    """An Event to record on an object: a decision (its facts) or other words, and why."""

    kind: str
    namespace: str
    name: str
    uid: str
    reason: str
    prose: str  # the words of a note that is no bind or release
    type: Literal["Normal", "Warning"] = "Normal"
    decision: Decision | None = None

    @property
    def message(self) -> str:
        """The Event's note, in words."""
        return self.decision.render() if self.decision is not None else self.prose


@dataclass(slots=True)
class Write:
    """A staged write (binder.writes) and what the plan keeps beside it."""

    op: WriteOp
    # For device writes: what the world held before this write was staged.
    before: GPUDevice | None = None
    notes: list[Note] = field(default_factory=list)
    placement: bool = False
    # The writes (plan keys) this one is made after, as soon as they are all written,
    # rather than in its wave (Plan.waves): a bind request's answer after its own devices.
    # None: by its wave.
    after: tuple[tuple[str, str], ...] | None = None

    @property
    def obj(self) -> Any:
        return target(self.op)


@dataclass(frozen=True, slots=True)
class Savepoint:
    writes: dict[tuple[str, str], tuple[WriteOp, int, bool, tuple[tuple[str, str], ...] | None]]
    notes: int


class Plan:
    """Writes of one step in the order they were decided, one per object."""

    def __init__(self, world: World, now: datetime) -> None:
        self.world = world
        self.now = now
        self.writes: dict[tuple[str, str], Write] = {}
        self.notes: list[Note] = []
        # The device writes' keys in the order they were staged, each time: what one
        # decision touched is touched[mark:] (`touched_since`).
        self.touched: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self.writes)

    def device_status(
        self, new: GPUDevice, note: Note | None = None, placement: bool = False
    ) -> None:
        self._device(Status(new), note, placement)

    def device_update(self, new: GPUDevice) -> None:
        self._device(Update(new), None, False)

    def _device(self, op: Status | Update, note: Note | None, placement: bool) -> None:
        new: GPUDevice = op.obj
        key = ("GPUDevice", new.metadata.name)
        current = self.world.devices.get(new.metadata.name)
        w = self.writes.get(key)
        if w is None:
            w = self.writes[key] = Write(op, before=current)
        elif type(w.op) is not type(op):
            raise AssertionError(f"{op.VERB} and {w.op.VERB} of one device in one step")
        w.op = op
        w.placement = w.placement or placement
        if note is not None:
            w.notes.append(note)
        self.touched.append(key)
        self.world.staged.add(new.metadata.name)
        self.world.put_device(new)

    def write(
        self,
        op: WriteOp,
        note: Note | None = None,
        after: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        """A write of another kind: a request's answer or deletion, a record, a class status.

        `after`: the device writes it is made after, as soon as those are written (a bind
        request's answer after its own devices' binds, not after every bind of the pass);
        None: in its wave (`waves`)."""
        obj = target(op)
        meta = obj.metadata if hasattr(obj, "metadata") else None
        name = f"{meta.namespace}/{meta.name}" if meta is not None else str(id(op))
        key = (type(obj if obj is not None else op).__name__, name)
        w = self.writes.setdefault(key, Write(op))
        w.op = op
        w.after = after
        if note is not None:
            w.notes.append(note)

    def touched_since(self, mark: int) -> tuple[tuple[str, str], ...]:
        """The device writes staged (or staged again) since len(touched) was mark."""
        return tuple(dict.fromkeys(self.touched[mark:]))

    def after_deps(self) -> dict[int, set[int]]:
        """The writes made after others (`write`'s `after`), by index: the indices of the
        writes of this plan each waits for (none left: it goes with the first wave)."""
        index = {key: i for i, key in enumerate(self.writes)}
        out: dict[int, set[int]] = {}
        for i, w in enumerate(self.writes.values()):
            if w.after is not None:
                out[i] = {index[k] for k in w.after if k in index and index[k] != i}
        return out

    def waves(self) -> list[list[int]]:
        """The writes' indices (in decision order) in the order they may be made: device
        binds, then the other device writes (releases, phases, finalizers), then writes of
        other kinds (a bind request's answer, records' closes, statuses), then the records
        opened, then the tenants' copies of records (a copy never says more than the
        ledger: a record's write refused starts no copy of it). Within a wave, writes touch
        distinct objects and may be made together; a wave starts once the one before it
        was written whole.

        A record opens after the closes: a device released and bound to another order
        before the binder looked closes one record and opens the next in one pass, and
        made together the ledger would hold both open for a moment, or for good if the
        close was refused (invariant 11). The next pass opens what a stopped wave left.

        Writes made after others (`after_deps`) are in no wave: the reconciler makes each
        as soon as those it waits for are written."""
        waves: list[list[int]] = [[], [], [], [], []]
        for i, w in enumerate(self.writes.values()):
            if w.after is not None:
                continue
            if isinstance(w.obj, GPUUsageRecord) and is_copy(w.obj):
                waves[4].append(i)
            elif isinstance(w.obj, GPUUsageRecord) and isinstance(w.op, Create | OpenRecord):
                waves[3].append(i)
            elif not isinstance(w.obj, GPUDevice):
                waves[2].append(i)
            elif (
                isinstance(w.op, Status)
                and w.obj.status.binding is not None
                and (w.before is None or w.before.status.binding != w.obj.status.binding)
            ):
                waves[0].append(i)
            else:
                waves[1].append(i)
        return [wave for wave in waves if wave]

    def savepoint(self) -> Savepoint:
        """Where the plan stands, to take back decisions that turn out to be half of one."""
        return Savepoint(
            {k: (w.op, len(w.notes), w.placement, w.after) for k, w in self.writes.items()},
            len(self.notes),
        )

    def rollback(self, sp: Savepoint) -> None:
        """Undo every write and note staged after sp, in the world too."""
        for key in list(self.writes)[::-1]:
            w = self.writes[key]
            kept = sp.writes.get(key)
            if kept is None:
                del self.writes[key]
                if isinstance(w.obj, GPUDevice):
                    if w.before is None:
                        self.world.devices.remove(w.obj.metadata.name)
                    else:
                        self.world.put_device(w.before)
                continue
            op, notes, placement, after = kept
            w.after = after
            if w.obj is not target(op):
                w.op, w.placement = op, placement
                if isinstance(w.obj, GPUDevice):
                    self.world.put_device(w.obj)
            del w.notes[notes:]
        del self.notes[sp.notes :]

    def note(self, note: Note) -> None:
        """An Event with no write: a refusal, or a decision not to act."""
        self.notes.append(note)
