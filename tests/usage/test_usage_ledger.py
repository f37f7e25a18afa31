"""Clipping usage records to a billing period and summing them per group."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from gpu_binder.usage.ledger import Malformed, Period, clip, entry_of, summarize

from .records import T0, at, entry, period, record

HOUR = timedelta(hours=1)
LATE = at(1000)  # a "now" long after every period of these tests


def test_a_closed_record_inside_the_period_counts_whole() -> None:
    assert clip(entry(2, 5), period(0, 10), LATE) == 3 * HOUR


def test_a_record_that_started_before_the_period_counts_from_its_start() -> None:
    assert clip(entry(-5, 3), period(0, 10), LATE) == 3 * HOUR


def test_a_record_that_ended_after_the_period_counts_until_its_end() -> None:
    assert clip(entry(8, 20), period(0, 10), LATE) == 2 * HOUR


def test_an_open_record_counts_until_the_end_of_a_past_period() -> None:
    assert clip(entry(8, None), period(0, 10), LATE) == 2 * HOUR


def test_an_open_record_counts_until_now_within_a_period_that_has_not_ended() -> None:
    assert clip(entry(2, None), period(0, 10), now=at(6)) == 4 * HOUR


def test_a_record_outside_the_period_counts_nothing() -> None:
    assert clip(entry(-5, -1), period(0, 10), LATE) == timedelta(0)
    assert clip(entry(10, 12), period(0, 10), LATE) == timedelta(0)


def test_an_open_record_that_started_after_now_counts_nothing() -> None:
    assert clip(entry(7, None), period(0, 10), now=at(6)) == timedelta(0)


def test_usage_is_summed_per_namespace_and_class() -> None:
    entries = [
        entry(0, 2, namespace="a", class_name="h100"),
        entry(1, 4, namespace="a", class_name="h100"),
        entry(0, 1, namespace="a", class_name="l40s"),
        entry(0, 5, namespace="b", class_name="h100"),
    ]
    summary = summarize(entries, period(0, 10), ("namespace", "class"), LATE)
    assert [(g.key, g.records, g.usage) for g in summary.groups] == [
        (("a", "h100"), 2, 5 * HOUR),
        (("a", "l40s"), 1, 1 * HOUR),
        (("b", "h100"), 1, 5 * HOUR),
    ]


def test_the_total_sums_every_group() -> None:
    entries = [entry(0, 2, namespace="a"), entry(0, 3, namespace="b", class_name="l40s")]
    total = summarize(entries, period(0, 10), ("namespace",), LATE).total
    assert (total.records, total.usage, total.classes) == (2, 5 * HOUR, ("h100", "l40s"))


def test_a_group_lists_the_classes_of_its_records() -> None:
    entries = [entry(0, 1, class_name="l40s"), entry(0, 1, class_name="h100")]
    (group,) = summarize(entries, period(0, 10), ("namespace",), LATE).groups
    assert group.classes == ("h100", "l40s")


def test_records_with_no_time_in_the_period_are_not_counted() -> None:
    entries = [entry(0, 1), entry(20, 30)]
    (group,) = summarize(entries, period(0, 10), ("namespace",), LATE).groups
    assert group.records == 1


def test_vms_are_told_apart_by_namespace() -> None:
    entries = [entry(0, 1, namespace="a", vm="web"), entry(0, 2, namespace="b", vm="web")]
    summary = summarize(entries, period(0, 10), ("vm",), LATE)
    assert [g.key for g in summary.groups] == [("a/web",), ("b/web",)]


def test_usage_is_summed_per_node() -> None:
    entries = [entry(0, 1, node="n1"), entry(0, 2, node="n2"), entry(0, 3, node="n1")]
    summary = summarize(entries, period(0, 10), ("node",), LATE)
    assert [(g.key, g.usage) for g in summary.groups] == [(("n1",), 4 * HOUR), (("n2",), 2 * HOUR)]


def test_a_record_becomes_an_entry_with_its_namespace_vm_class_and_node() -> None:
    e = entry_of(record("r1", at(0), at(1), namespace="ns", vm="v", class_name="c", node="n"))
    assert (e.namespace, e.name, e.vm, e.class_name, e.node) == ("ns", "r1", "v", "c", "n")
    assert (e.start, e.end) == (at(0), at(1))


def test_a_record_that_ends_before_it_starts_is_malformed() -> None:
    with pytest.raises(Malformed, match=r"before spec\.start"):
        entry_of(record("r", at(5), at(1)))


def test_a_record_without_a_time_zone_is_malformed() -> None:
    with pytest.raises(Malformed, match="no time zone"):
        entry_of(record("r", datetime(2026, 11, 1)))


def test_a_period_must_end_after_it_starts() -> None:
    with pytest.raises(ValueError, match="before it starts"):
        Period(T0, T0)
