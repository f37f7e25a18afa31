"""Properties of the bill that hold for any records, periods and "now"."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpu_binder.usage.ledger import DIMENSIONS, Dimension, Entry, Period, clip, summarize

from .records import T0

# Microseconds within about two months of T0: records, periods and now all overlap often.
SPAN = 60 * 24 * 3600 * 1_000_000


def instants() -> st.SearchStrategy[datetime]:
    return st.integers(-SPAN, SPAN).map(lambda us: T0 + timedelta(microseconds=us))


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    start = draw(instants())
    length = draw(st.none() | st.integers(0, SPAN).map(lambda us: timedelta(microseconds=us)))
    return Entry(
        namespace=draw(st.sampled_from(["a", "b", "c"])),
        name="r",
        vm=draw(st.sampled_from(["v1", "v2"])),
        class_name=draw(st.sampled_from(["h100", "l40s", ""])),
        node=draw(st.sampled_from(["n1", "n2"])),
        start=start,
        end=None if length is None else start + length,
    )


@st.composite
def periods(draw: st.DrawFn) -> Period:
    start = draw(instants())
    return Period(start, start + timedelta(microseconds=draw(st.integers(1, SPAN))))


@st.composite
def split_periods(draw: st.DrawFn) -> tuple[Period, Period, Period]:
    """A period and the two adjacent periods it splits into."""
    a, b, c = sorted(draw(st.lists(instants(), min_size=3, max_size=3, unique=True)))
    return Period(a, c), Period(a, b), Period(b, c)


groupings = st.lists(st.sampled_from(DIMENSIONS), min_size=1, max_size=4, unique=True)


@given(entries(), periods(), instants())
def test_a_clipped_record_is_never_negative_nor_longer_than_the_period(
    e: Entry, p: Period, now: datetime
) -> None:
    assert timedelta(0) <= clip(e, p, now) <= p.length


@given(entries(), periods(), instants())
def test_a_closed_record_counts_no_more_than_its_own_length(
    e: Entry, p: Period, now: datetime
) -> None:
    if e.end is not None:
        assert clip(e, p, now) <= e.end - e.start


@given(entries(), periods(), instants())
def test_an_open_record_never_counts_time_after_now(e: Entry, p: Period, now: datetime) -> None:
    if e.end is None:
        assert clip(e, p, now) <= max(now - max(e.start, p.start), timedelta(0))


@given(entries(), split_periods(), instants())
def test_a_record_in_two_adjacent_periods_counts_as_in_the_whole(
    e: Entry, split: tuple[Period, Period, Period], now: datetime
) -> None:
    whole, first, second = split
    assert clip(e, first, now) + clip(e, second, now) == clip(e, whole, now)


@given(st.lists(entries(), max_size=30), split_periods(), instants(), groupings)
def test_bills_of_two_adjacent_periods_add_up_to_the_bill_of_the_whole(
    es: list[Entry],
    split: tuple[Period, Period, Period],
    now: datetime,
    by: list[Dimension],
) -> None:
    whole, first, second = (summarize(es, p, by, now) for p in split)
    parts: dict[tuple[str, ...], timedelta] = {}
    for g in (*first.groups, *second.groups):
        parts[g.key] = parts.get(g.key, timedelta(0)) + g.usage
    assert parts == {g.key: g.usage for g in whole.groups}


@given(st.lists(entries(), max_size=30), periods(), instants(), groupings, groupings)
def test_the_total_does_not_depend_on_the_grouping(
    es: list[Entry], p: Period, now: datetime, by: list[Dimension], other: list[Dimension]
) -> None:
    a, b = summarize(es, p, by, now).total, summarize(es, p, other, now).total
    assert (a.usage, a.records, a.classes) == (b.usage, b.records, b.classes)


@given(st.lists(entries(), max_size=30), periods(), instants(), groupings)
def test_the_total_is_the_sum_of_every_record_clipped(
    es: list[Entry], p: Period, now: datetime, by: list[Dimension]
) -> None:
    total = summarize(es, p, by, now).total
    assert total.usage == sum((clip(e, p, now) for e in es), timedelta(0))
    assert total.records == sum(1 for e in es if clip(e, p, now) > timedelta(0))


@given(st.lists(entries(), max_size=30), periods(), instants(), groupings)
def test_every_group_has_usage_and_a_distinct_key(
    es: list[Entry], p: Period, now: datetime, by: list[Dimension]
) -> None:
    groups = summarize(es, p, by, now).groups
    assert all(g.usage > timedelta(0) and g.records > 0 for g in groups)
    assert len({g.key for g in groups}) == len(groups)
