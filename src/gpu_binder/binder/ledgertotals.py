"""GPU-seconds per namespace, class and kind, as the ledger holds them: the values of the
counters gpu_binder_gpu_seconds_total (binder.metrics), which only ever increase, also
across leader changes and restarts.

What a process starts from: the ledger. Its closed records are read once (a paged list
of the ledger namespace, kube.ledgerfold), and every record closing afterwards is added
as it enters the closed selection (a watch from that list, folded, never cached: the
binder's cache holds open records only). Open records count up to now by the rule that
will close them (binder.intervals), so every replica, leader or not, exports the same
values, and a new process resumes where the ledger stands, not from zero.

Why the values never go down:
- a closed record is immutable and never deleted by the binder, so the closed part only
  grows (an operator pruning records lowers it for the next process only: README);
- an open record counts up to the end its close would give it now, but not past
  now - HOLDBACK: a VMI that ended a moment ago, unknown yet to this replica's watch, is
  not counted past its finish, so no process counts what the ledger will not hold;
- should the ledger still end up below what a process exported (a record closed with a
  finish time earlier than it was seen running, by a node's clock), the process holds
  its value until the ledger catches up, per series.
A record counted as closed while this replica's cache still holds it open is counted
once (as closed).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpu_binder.api.types import GPUUsageRecord, RecordKind, is_copy
from gpu_binder.binder.intervals import attached_end, attached_open, reserved_end
from gpu_binder.cache.world import World

Key = tuple[str, str, str]  # (namespace, class, kind: attached or reserved)
# How far behind now open records are counted: more than a watch lags.
HOLDBACK = timedelta(seconds=10)


def key_of(rec: GPUUsageRecord) -> Key:
    kind = "reserved" if rec.spec.kind == RecordKind.RESERVED else "attached"
    return (rec.tenant, rec.spec.class_name, kind)


class LedgerTotals:
    """Closed GPU-seconds per key, kept by kube.ledgerfold; with the open records of a
    world, the counters' values."""

    def __init__(self) -> None:
        self.closed: dict[Key, float] = {}
        # False until the closed records were read: no value is exported before (a
        # counter that starts low and then jumps would read as a burst of use).
        self.loaded = False
        # Records counted as closed by name: while a replica's cache still holds one
        # open, it is not counted a second time (pruned once the cache lets it go).
        self._counted: set[str] = set()
        self._high: dict[Key, float] = {}

    def restart(self) -> None:
        """The closed records are read anew (their watch expired): counted from scratch;
        what was exported stays the floor."""
        self.closed = {}
        self.loaded = False

    def count(self, rec: GPUUsageRecord) -> None:
        """A record of the ledger that is (now) closed."""
        end = rec.spec.end
        if end is None or is_copy(rec):
            return
        k = key_of(rec)
        self.closed[k] = self.closed.get(k, 0.0) + max((end - rec.spec.start).total_seconds(), 0.0)
        self._counted.add(rec.metadata.name)

    def values(self, world: World, now: datetime) -> dict[Key, float]:
        """The counters now: closed seconds, plus open records' so far; never below what
        they were."""
        out = dict(self.closed)
        counted = self._counted
        for name in [n for n in counted if n not in world.record_keys]:
            counted.discard(name)
        until = now - HOLDBACK
        for rec in world.records.values():
            if rec.metadata.name in counted:
                continue
            s = open_seconds(world, rec, now, until)
            if s > 0:
                k = key_of(rec)
                out[k] = out.get(k, 0.0) + s
        high = self._high
        for k, v in out.items():
            if v > high.get(k, 0.0):
                high[k] = v
        return dict(high)


def open_seconds(world: World, rec: GPUUsageRecord, now: datetime, until: datetime) -> float:
    """An open record's seconds so far: to the end its close would give it now (its
    VMI's finish, its device's next attachment or release), else to `until`."""
    d = world.devices.get(rec.spec.device)
    end: datetime | None
    if rec.spec.kind == RecordKind.RESERVED:
        end = reserved_end(now, rec, d)
    else:
        end = None if attached_open(world, rec, d) else attached_end(world, now, rec, d)
    stop = min(end, until) if end is not None else until
    return max((stop - rec.spec.start).total_seconds(), 0.0)
