"""Exports for billing systems (`gpu-binder usage --since-last FILE`): each run bills what
the ledger says was used since the last run, so a nightly export never bills a second
twice and never drops one, across any number of runs at any times.

Why a period alone cannot: the ledger learns of some seconds late. A record is opened
after its start when the binder was down as its VMI started, so its first seconds fall
into a period exported already; an open record is billed until the run's end, and if
its VMI had in fact stopped while no binder ran, it is closed later with an end before
that. So a run does not bill a period, it bills records: per record, what the ledger
says of it now (clipped to [from, to) of the whole export history) minus what earlier
runs billed of it. That difference is negative for a record closed with an end before
what was billed of it: the run bills the correction, and the sum of all runs is the
ledger's truth exactly.

The state file remembers, per record, what was billed of it (in microseconds, exactly),
but only for records that may still change or could be mistaken for new: open ones, and
those the API server created after `cursor - MARGIN`, where the cursor is the latest
creation time any run saw. Any other record was seen by an earlier run (its list held
every record created before it) and billed whole, and is skipped. MARGIN covers the
clocks of several API servers and a list that took long; the state stays small (open
records and those of the last MARGIN), whatever the ledger's size.

Pure: no I/O. command.py reads and writes the file (locked, replaced atomically after the
report was printed).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpu_binder.usage.ledger import ZERO, Dimension, Entry, Kind, Ledger, Period, Summary, clip

VERSION = 1
MARGIN = timedelta(hours=1)
_US = timedelta(microseconds=1)


class StateError(ValueError):
    """A state file that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Billed:
    """What earlier runs billed of one record, and when the API server created it."""

    us: int
    created: datetime | None


@dataclass(frozen=True, slots=True)
class State:
    """Where the exports stand: the start of the first (`origin`), the end of the last
    (`to`), and what was billed of the records that may still change."""

    origin: datetime
    to: datetime
    scope: dict[str, str | None]
    cursor: datetime | None = None
    billed: dict[str, Billed] = field(default_factory=dict)

    def to_json(self) -> str:
        doc = {
            "version": VERSION,
            "from": self.origin.isoformat(),
            "to": self.to.isoformat(),
            "scope": self.scope,
            "cursor": self.cursor.isoformat() if self.cursor else None,
            "billed": {
                name: {"us": b.us, "created": b.created.isoformat() if b.created else None}
                for name, b in sorted(self.billed.items())
            },
        }
        return json.dumps(doc, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> State:
        try:
            doc = json.loads(text)
            if doc.get("version") != VERSION:
                raise StateError(f"version {doc.get('version')!r}, not {VERSION}")
            billed = {
                str(name): Billed(int(b["us"]), _time(b.get("created")))
                for name, b in (doc.get("billed") or {}).items()
            }
            origin, to = _time(doc["from"]), _time(doc["to"])
            if origin is None or to is None:
                raise StateError("no from or to")
            return cls(origin, to, dict(doc.get("scope") or {}), _time(doc.get("cursor")), billed)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise StateError(str(e)) from None


def _time(text: Any) -> datetime | None:
    if text is None:
        return None
    t = datetime.fromisoformat(str(text))
    if t.tzinfo is None:
        raise StateError(f"time {text!r} has no time zone")
    return t


def _key(e: Entry) -> str:
    return f"{e.namespace}/{e.name}"


@dataclass(frozen=True, slots=True)
class Export:
    """One run: what it bills (per group; negative for corrections) and the state after."""

    summary: Summary
    state: State
    corrections: int


def export(
    entries: Iterable[Entry],
    state: State,
    to: datetime,
    by: Iterable[Dimension],
    now: datetime,
    kind: Kind = "all",
) -> Export:
    """Bill, per record, what the ledger says of it in [state.origin, to) minus what
    earlier runs billed of it; the period shown is [state.to, to)."""
    whole = Period(state.origin, to)
    horizon = state.cursor - MARGIN if state.cursor is not None else None
    ledger = Ledger(Period(state.to, to), by, now, kind)
    billed: dict[str, Billed] = {}
    settled: set[str] = set()
    cursor = state.cursor
    corrections = 0
    for e in entries:
        if not ledger.counts(e):
            continue
        key = _key(e)
        if e.created is not None and (cursor is None or e.created > cursor):
            cursor = e.created
        before = state.billed.get(key)
        seen = horizon is not None and e.created is not None and e.created < horizon
        if before is None and seen:
            continue  # seen whole by an earlier run (see the module docstring)
        now_us = clip(e, whole, now) // _US
        was = before.us if before is not None else 0
        if now_us != was:
            delta = (now_us - was) * _US
            corrections += delta < ZERO
            ledger.add(e, delta)
        billed[key] = Billed(now_us, e.created)
        if e.end is not None and e.end <= to:
            settled.add(key)
    # Kept: what may still change (not settled), or be mistaken for new by the next run
    # (created after the new cursor's horizon, or with no creation time to tell).
    keep_after = cursor - MARGIN if cursor is not None else None
    kept = {
        k: b
        for k, b in billed.items()
        if k not in settled or b.created is None or keep_after is None or b.created >= keep_after
    }
    out = State(state.origin, to, state.scope, cursor, kept)
    return Export(ledger.summary(), out, corrections)


def first(origin: datetime, scope: dict[str, str | None]) -> State:
    """The state before a first export from origin."""
    return State(origin, origin, scope)
