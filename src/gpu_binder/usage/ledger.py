"""GPU time from the ledger: usage records clipped to a period and summed per group.

Pure: no I/O and no clock. The caller says what "now" is, so an open record counts until
the period's end or now, whichever is earlier, and the same input always gives the same bill.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from gpu_binder.api.types import GPUUsageRecord

Dimension = Literal["namespace", "vm", "class", "node"]
DIMENSIONS: tuple[Dimension, ...] = ("namespace", "vm", "class", "node")
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
    end: datetime | None  # None while the attachment lasts

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
    if not meta.namespace:
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
        namespace=meta.namespace,
        name=meta.name,
        vm=spec.vm,
        class_name=spec.class_name,
        node=spec.node_name,
        start=spec.start,
        end=spec.end,
    )


def clip(entry: Entry, period: Period, now: datetime) -> timedelta:
    """The GPU time of entry inside period: never negative, never longer than the period."""
    end = entry.end if entry.end is not None else min(period.end, now)
    overlap = min(end, period.end) - max(entry.start, period.start)
    return max(overlap, ZERO)


@dataclass(frozen=True, slots=True)
class Group:
    """The GPU time of the records sharing one key, and how many records made it."""

    key: tuple[str, ...]
    records: int
    usage: timedelta
    classes: tuple[str, ...]

    @property
    def gpu_seconds(self) -> float:
        return self.usage / timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Summary:
    period: Period
    now: datetime
    by: tuple[Dimension, ...]
    groups: tuple[Group, ...]  # in order of their keys

    @property
    def total(self) -> Group:
        classes = sorted({c for g in self.groups for c in g.classes})
        return Group(
            key=(),
            records=sum(g.records for g in self.groups),
            usage=sum((g.usage for g in self.groups), ZERO),
            classes=tuple(classes),
        )


class Ledger:
    """Sums entries into groups as they arrive, so a long list is never held whole."""

    def __init__(self, period: Period, by: Iterable[Dimension], now: datetime) -> None:
        self.period = period
        self.by = tuple(by)
        self.now = now
        self._usage: dict[tuple[str, ...], timedelta] = {}
        self._records: dict[tuple[str, ...], int] = {}
        self._classes: dict[tuple[str, ...], set[str]] = {}

    def add(self, entry: Entry) -> None:
        used = clip(entry, self.period, self.now)
        # A record with no time inside the period is not part of this bill at all.
        if used <= ZERO:
            return
        key = tuple(entry.key(d) for d in self.by)
        self._usage[key] = self._usage.get(key, ZERO) + used
        self._records[key] = self._records.get(key, 0) + 1
        self._classes.setdefault(key, set()).add(entry.class_name)

    def summary(self) -> Summary:
        groups = tuple(
            Group(key, self._records[key], self._usage[key], tuple(sorted(self._classes[key])))
            for key in sorted(self._usage)
        )
        return Summary(self.period, self.now, self.by, groups)


def summarize(
    entries: Iterable[Entry], period: Period, by: Iterable[Dimension], now: datetime
) -> Summary:
    """The GPU time of entries inside period, per group of the dimensions in by."""
    ledger = Ledger(period, by, now)
    for entry in entries:
        ledger.add(entry)
    return ledger.summary()
