"""Exports for billing systems: each run bills what the ledger says was used since the
last one, per record, so runs at any times bill no second twice and drop none, even of
records the ledger learns of late (opened after their start, closed before what an
earlier run billed of them)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.usage.export import MARGIN, State, export, first
from gpu_binder.usage.ledger import ZERO, Entry

from .records import at, entry

SCOPE: dict[str, str | None] = {"namespace": None, "kind": "all"}
BY = ("vm",)


def billed(run: object) -> dict[str, float]:
    """Hours billed per VM by an export."""
    summary = run.summary  # type: ignore[attr-defined]
    return {g.key[0].split("/")[1]: g.usage / timedelta(hours=1) for g in summary.groups}


def test_a_first_export_bills_from_its_from_to_its_to() -> None:
    run = export(
        [entry(-2, 3, vm="a"), entry(1, None, vm="b")], first(at(0), SCOPE), at(5), BY, at(5)
    )
    assert billed(run) == {"a": 3.0, "b": 4.0}
    assert (run.state.origin, run.state.to) == (at(0), at(5))


def test_the_next_export_bills_only_what_came_since() -> None:
    ledger = [entry(1, None, vm="b", created=1)]
    one = export(ledger, first(at(0), SCOPE), at(5), BY, at(5))
    two = export(ledger, one.state, at(8), BY, at(8))
    assert billed(one) == {"b": 4.0} and billed(two) == {"b": 3.0}
    assert (two.summary.period.start, two.summary.period.end) == (at(5), at(8))


def test_a_record_opened_late_is_billed_from_its_start_by_the_next_export() -> None:
    one = export([], first(at(0), SCOPE), at(5), BY, at(5))
    # Its VMI started at 3 while no binder ran; the binder opened it at 6, from 3.
    late = [entry(3, None, vm="late", created=6)]
    two = export(late, one.state, at(8), BY, at(8))
    assert billed(two) == {"late": 5.0}


def test_a_record_closed_before_what_was_billed_is_corrected_by_the_next_export() -> None:
    one = export([entry(1, None, vm="b", created=1)], first(at(0), SCOPE), at(5), BY, at(5))
    # Its VMI had stopped at 4, while no binder ran: closed later, at 4.
    two = export([entry(1, 4, vm="b", created=1)], one.state, at(8), BY, at(8))
    assert billed(two) == {"b": -1.0} and two.corrections == 1


def test_a_settled_record_leaves_the_state_and_is_never_billed_again() -> None:
    done = entry(1, 2, vm="done", name="done", created=1)
    state = export([done], first(at(0), SCOPE), at(5), BY, at(5)).state
    assert list(state.billed) == ["tenant-a/done"], "created near the cursor: kept to tell"
    young = entry(100, None, vm="young", name="young", created=100)  # the cursor moves on
    state = export([done, young], state, at(101), BY, at(101)).state
    assert list(state.billed) == ["tenant-a/young"], "settled and old: left out"
    later = export([done, young], state, at(102), BY, at(102))
    assert billed(later) == {"young": 1.0}


def test_the_state_round_trips_through_its_file() -> None:
    run = export([entry(1, None, vm="b", created=1)], first(at(0), SCOPE), at(5), BY, at(5))
    assert State.from_json(run.state.to_json()) == run.state


# --- any runs at any times ----------------------------------------------------------


@dataclass(frozen=True)
class History:
    """One record's life: it ran from start to end (None: still running); the ledger
    learned of it at `seen` (opened then, with its true start) and of its end at
    `closed`; the API server stamped its creation up to half the margin early."""

    start: float
    end: float | None
    seen: float
    closed: float
    skew: float

    def as_of(self, t: float, name: str) -> Entry | None:
        """The record as a list at t returns it, or None before it exists."""
        if t < self.seen:
            return None
        end = self.end if self.end is not None and t >= self.closed else None
        return entry(self.start, end, vm=name, name=name, created=self.seen - self.skew)


hours = st.floats(min_value=0, max_value=48, allow_nan=False).map(lambda h: round(h, 3))


@st.composite
def histories(draw: st.DrawFn) -> History:
    start = draw(hours)
    length = draw(st.one_of(st.none(), st.floats(0, 24).map(lambda h: round(h, 3))))
    end = None if length is None else start + length
    seen = start + draw(st.sampled_from([0.0, 0.0, 0.01, 1.5, 6.0]))
    closed = max((end or 0) + draw(st.sampled_from([0.0, 0.0, 0.5, 4.0])), seen)
    skew = draw(st.floats(0, MARGIN / timedelta(hours=1) / 2))
    return History(start, end, seen, closed, skew)


def clipped_hours(e: Entry | None, origin: datetime, to: datetime) -> float:
    if e is None:
        return 0.0
    end = e.end if e.end is not None else to
    return max(min(end, to) - max(e.start, origin), ZERO) / timedelta(hours=1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(histories(), min_size=1, max_size=8),
    st.lists(st.floats(0.5, 80).map(lambda h: round(h, 3)), min_size=1, max_size=8, unique=True),
)
def test_exports_at_any_times_bill_each_second_once_and_drop_none(
    records: list[History], times: list[float]
) -> None:
    names = [f"r{i}" for i in range(len(records))]
    state = first(at(0), SCOPE)
    total: dict[str, float] = dict.fromkeys(names, 0.0)
    for t in sorted(times):
        ledger = [e for h, n in zip(records, names, strict=True) if (e := h.as_of(t, n))]
        run = export(ledger, state, at(t), BY, at(t))
        for name, h in billed(run).items():
            total[name] += h
        state = run.state
        # What all runs billed of each record so far is what the ledger says of it now.
        for h, n in zip(records, names, strict=True):
            assert abs(total[n] - clipped_hours(h.as_of(t, n), at(0), at(t))) < 1e-6, n
