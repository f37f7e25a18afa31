"""GPU time from the ledger: usage records clipped to a period and summed per group.

Pure: no I/O and no clock. The caller says what "now" is, so an open record counts until
the period's end or now, whichever is earlier, and the same input always gives the same bill.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from gpu_binder.api.types import RECORD_NAMESPACE_LABEL, GPUUsageRecord, RecordKind
from gpu_binder.binder import Config

Dimension = Literal["namespace", "vm", "class", "node"]
DIMENSIONS: tuple[Dimension, ...] = ("namespace", "vm", "class", "node")
# Which records a bill counts: GPU time in use by VMIs, GPUs reserved for stopped VMs
# (bound with no VMI on them), or both, side by side.
Kind = Literal["attached", "reserved", "all"]
KINDS: tuple[Kind, ...] = ("attached", "reserved", "all")
ZERO = timedelta(0)


class Malformed(ValueError):
    """A record the bill cannot use; the message says what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record left out of the bill, and why."""

    record: str  # namespace/name
    reason: str


@dataclass(frozen=True, slots=True)
class Period:
    """The half-open interval [start, end) a bill covers, in time-zone-aware times."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("a period's times need a time zone")
        if self.end <= self.start:
            raise ValueError(f"the period ends ({self.end}) before it starts ({self.start})")

    @property
    def length(self) -> timedelta:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Entry:
    """One usage record, reduced to what a bill needs: one GPU from start to end."""

    namespace: str
    name: str
    vm: str
    class_name: str
    node: str
    start: datetime
    end: datetime | None  # None while the interval lasts
    kind: Literal["attached", "reserved"] = "attached"
    # When the API server stored the record (for exports, see usage.export).
    created: datetime | None = None

    def key(self, dimension: Dimension) -> str:
        if dimension == "namespace":
            return self.namespace
        if dimension == "vm":
            # VM names are unique per namespace only, so the namespace is part of the key.
            return f"{self.namespace}/{self.vm}"
        if dimension == "class":
            return self.class_name
        return self.node


def entry_of(record: GPUUsageRecord) -> Entry:
    """The record as an Entry; Malformed when its times cannot be billed."""
    meta, spec = record.metadata, record.spec
    if not record.tenant:
        raise Malformed("it has no namespace")
    if spec.start.tzinfo is None:
        raise Malformed(f"spec.start {spec.start.isoformat()} has no time zone")
    if spec.end is not None:
        if spec.end.tzinfo is None:
            raise Malformed(f"spec.end {spec.end.isoformat()} has no time zone")
        if spec.end < spec.start:
            raise Malformed(
                f"spec.end {spec.end.isoformat()} is before spec.start {spec.start.isoformat()}"
            )
    return Entry(
        namespace=record.tenant,
        name=meta.name,
        vm=spec.vm,
        class_name=spec.class_name,
        node=spec.node_name,
        start=spec.start,
        end=spec.end,
        kind="reserved" if spec.kind == RecordKind.RESERVED else "attached",
        created=meta.creation_timestamp,
    )


def clip(entry: Entry, period: Period, now: datetime) -> timedelta:
    """The GPU time of entry inside period: never negative, never longer than the period."""
    end = entry.end if entry.end is not None else min(period.end, now)
    overlap = min(end, period.end) - max(entry.start, period.start)
    return max(overlap, ZERO)


@dataclass(frozen=True, slots=True)
class Group:
    """The GPU time of the records sharing one key, attached and reserved, and how many
    records made it."""

    key: tuple[str, ...]
    records: int
    attached: timedelta
    reserved: timedelta
    classes: tuple[str, ...]

    @property
    def usage(self) -> timedelta:
        return self.attached + self.reserved

    @property
    def gpu_seconds(self) -> float:
        return self.usage / timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Summary:
    period: Period
    now: datetime
    by: tuple[Dimension, ...]
    groups: tuple[Group, ...]  # in order of their keys
    kind: Kind = "all"

    @property
    def total(self) -> Group:
        classes = sorted({c for g in self.groups for c in g.classes})
        return Group(
            key=(),
            records=sum(g.records for g in self.groups),
            attached=sum((g.attached for g in self.groups), ZERO),
            reserved=sum((g.reserved for g in self.groups), ZERO),
            classes=tuple(classes),
        )


class Ledger:
    """Sums entries into groups as they arrive, so a long list is never held whole."""

    def __init__(
        self, period: Period, by: Iterable[Dimension], now: datetime, kind: Kind = "all"
    ) -> None:
        self.period = period
        self.by = tuple(by)
        self.now = now
        self.kind = kind
        self._usage: dict[tuple[str, ...], dict[str, timedelta]] = {}
        self._records: dict[tuple[str, ...], int] = {}
        self._classes: dict[tuple[str, ...], set[str]] = {}

    def counts(self, entry: Entry) -> bool:
        """Whether the bill counts entries of its kind."""
        return self.kind == "all" or entry.kind == self.kind

    def add(self, entry: Entry, used: timedelta | None = None) -> None:
        """Count entry's time inside the period, or `used` (an export's change, which may
        be negative: see usage.export)."""
        if not self.counts(entry):
            return
        if used is None:
            used = clip(entry, self.period, self.now)
            # A record with no time inside the period is not part of this bill at all.
            if used <= ZERO:
                return
        elif used == ZERO:
            return
        key = tuple(entry.key(d) for d in self.by)
        per_kind = self._usage.setdefault(key, {})
        per_kind[entry.kind] = per_kind.get(entry.kind, ZERO) + used
        self._records[key] = self._records.get(key, 0) + 1
        self._classes.setdefault(key, set()).add(entry.class_name)

    def summary(self) -> Summary:
        groups = tuple(
            Group(
                key,
                self._records[key],
                self._usage[key].get("attached", ZERO),
                self._usage[key].get("reserved", ZERO),
                tuple(sorted(self._classes[key])),
            )
            for key in sorted(self._usage)
        )
        return Summary(self.period, self.now, self.by, groups, self.kind)


def summarize(
    entries: Iterable[Entry],
    period: Period,
    by: Iterable[Dimension],
    now: datetime,
    kind: Kind = "all",
) -> Summary:
    """The GPU time of entries inside period, per group of the dimensions in by."""
    ledger = Ledger(period, by, now, kind)
    for entry in entries:
        ledger.add(entry)
    return ledger.summary()


DEFAULT_LEDGER = Config().ledger_namespace


@dataclass(frozen=True, slots=True)
class Where:
    """Which records a read lists: the ledger's (every tenant's, or one tenant's by its
    label), or a tenant's copies in its own namespace (what a tenant may read)."""

    namespace: str | None = None  # the tenant; None: every tenant
    ledger: str = DEFAULT_LEDGER
    copies: bool = False

    @property
    def listed(self) -> str:
        """The namespace listed."""
        return (self.namespace or "") if self.copies else self.ledger

    @property
    def selector(self) -> str | None:
        if self.copies or not self.namespace:
            return None
        return f"{RECORD_NAMESPACE_LABEL}={self.namespace}"

    def describe(self) -> str:
        if self.copies:
            return f"the copies in namespace {self.namespace}"
        return f"the ledger (namespace {self.ledger})"
