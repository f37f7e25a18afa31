"""The mix counts the newest orders by creation time, whatever order they come and go in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.placement import Demand, Mix, Recent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
PAIR = Demand(2, 0, 0, frozenset({"a"}))
EIGHT = Demand(8, 0, 0, frozenset({"a"}))


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_the_mix_counts_only_the_newest_orders() -> None:
    mix = Mix()
    recent = Recent(mix, size=2)
    recent.set("old", at(0), (EIGHT,))
    recent.set("mid", at(1), (PAIR,))
    recent.set("new", at(2), (PAIR,))
    assert mix.counts == {PAIR: 2}


def test_an_order_created_before_the_counted_ones_is_not_counted() -> None:
    # A resync lists an old VM after newer ones: its age, not when it was seen, decides.
    mix = Mix()
    recent = Recent(mix, size=2)
    recent.set("mid", at(1), (PAIR,))
    recent.set("new", at(2), (PAIR,))
    recent.set("old", at(0), (EIGHT,))
    assert mix.counts == {PAIR: 2}


def test_a_counted_order_that_goes_lets_the_newest_uncounted_one_in() -> None:
    mix = Mix()
    recent = Recent(mix, size=2)
    recent.set("old", at(0), (EIGHT,))
    recent.set("mid", at(1), (PAIR,))
    recent.set("new", at(2), (PAIR,))
    recent.set("new", at(2), ())
    assert mix.counts == {EIGHT: 1, PAIR: 1}
    assert "new" not in recent


def test_an_order_that_changes_keeps_its_age() -> None:
    mix = Mix()
    recent = Recent(mix, size=1)
    recent.set("old", at(0), (PAIR,))
    recent.set("new", at(1), (PAIR,))
    recent.set("old", at(0), (EIGHT,))
    assert mix.counts == {PAIR: 1}


def test_orders_of_the_same_age_count_in_the_order_they_were_seen() -> None:
    mix = Mix()
    recent = Recent(mix, size=1)
    recent.set("b", None, (EIGHT,))
    recent.set("a", None, (PAIR,))
    assert mix.counts == {PAIR: 1}


KEYS = st.sampled_from(["k0", "k1", "k2", "k3", "k4", "k5"])
DEMANDS = st.sampled_from([(), (PAIR,), (EIGHT,), (PAIR, EIGHT)])


STEPS = st.lists(st.tuples(KEYS, st.integers(0, 3), DEMANDS), max_size=30)
Step = tuple[str, int, tuple[Demand, ...]]


def newest_after_each(
    recent: Recent, steps: list[Step], size: int
) -> Iterator[list[tuple[Demand, ...]]]:
    """Apply each step to recent, then yield what a recount from scratch reads: the
    demands of the newest `size` live orders, oldest first."""
    ages: dict[str, tuple[datetime, int]] = {}
    live: dict[str, tuple[Demand, ...]] = {}
    seen = 0
    for key, minute, demands in steps:
        recent.set(key, at(minute), demands)
        if not demands:
            live.pop(key, None)
            ages.pop(key, None)
        else:
            if key not in ages:
                seen += 1
                ages[key] = (at(minute), seen)
            live[key] = demands
        yield [live[k] for k in sorted(live, key=lambda k: ages[k])[-size:]]


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 4), steps=STEPS)
def test_the_mix_always_equals_a_recount_of_the_newest_orders(size: int, steps: list[Step]) -> None:
    mix = Mix()
    for newest in newest_after_each(Recent(mix, size=size), steps, size):
        expected = Counter(d for kind in newest for d in kind)
        assert mix.counts == dict(expected)
        assert len(mix) == sum(expected.values())


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 4), steps=STEPS)
def test_the_looks_always_equal_a_recount_of_the_runs_among_the_newest_orders(
    size: int, steps: list[Step]
) -> None:
    recent = Recent(Mix(), size=size)
    for kinds in newest_after_each(recent, steps, size):
        runs = [kind for i, kind in enumerate(kinds) if i == 0 or kind != kinds[i - 1]]
        assert recent.unseen_share() == 1 / (len(runs) + 2)


SINGLE = Demand(1, 0, 0, frozenset({"a"}))


def ordered(recent: Recent, *kinds: Demand) -> None:
    """Orders of these kinds, created one minute apart in this order."""
    for i, kind in enumerate(kinds):
        recent.set(f"vm-{i}", at(i), (kind,))


def test_with_no_order_counted_a_kind_not_seen_is_as_likely_as_not() -> None:
    assert Recent(Mix()).unseen_share() == 1 / 2


def test_a_burst_of_alike_orders_is_one_look_at_the_mix() -> None:
    # 35 orders in two runs: two looks, so the next order is of a kind not seen yet with
    # chance 1 / (2 + 2), as after two orders of two kinds.
    recent = Recent(Mix())
    ordered(recent, *[SINGLE] * 18, *[PAIR] * 17)
    assert recent.unseen_share() == 1 / 4


def test_orders_of_changing_kinds_are_a_look_each() -> None:
    recent = Recent(Mix())
    ordered(recent, *[SINGLE, PAIR] * 10, EIGHT)
    assert recent.unseen_share() == 1 / 23


def test_the_unseen_share_reads_only_the_counted_orders() -> None:
    recent = Recent(Mix(), size=4)
    ordered(recent, EIGHT, *[SINGLE, PAIR] * 2)
    assert recent.unseen_share() == 1 / 6


def test_the_unseen_share_follows_orders_that_go() -> None:
    recent = Recent(Mix())
    ordered(recent, SINGLE, PAIR, SINGLE, PAIR, SINGLE)
    assert recent.unseen_share() == 1 / 7
    recent.set("vm-3", None, ())
    # SINGLE, PAIR, then SINGLE twice in a row: three looks.
    assert recent.unseen_share() == 1 / 5


def test_the_mix_s_floor_is_the_unseen_share_while_that_is_larger() -> None:
    mix = Mix(whole_node_floor=0.02)
    recent = Recent(mix)
    ordered(recent, *[SINGLE] * 5, *[PAIR] * 5)
    assert mix.floor_share("a", 8) == 1 / 4
    ordered(recent, *[SINGLE, PAIR] * 50)
    assert mix.floor_share("a", 8) == 0.02


def test_the_known_orders_of_the_largest_size_count_toward_the_floor() -> None:
    mix = Mix()
    ordered(Recent(mix), *[SINGLE] * 5, EIGHT)
    # Two looks at six orders: a look is worth 3 orders, so by succession 8-GPU orders
    # are (1 + 3) / (6 + 6) of those to come, less the 1/6 known.
    assert mix.floor_share("a", 8) == pytest.approx(4 / 12 - 1 / 6)


def test_a_burst_of_orders_of_the_largest_size_is_one_look() -> None:
    mix = Mix()
    ordered(Recent(mix), *[SINGLE] * 6, *[EIGHT] * 3, *[PAIR] * 6)
    # Three looks at 15 orders, a look worth 5: (3 + 5) / (15 + 10) less the 3/15 known.
    assert mix.floor_share("a", 8) == pytest.approx(8 / 25 - 3 / 15)


def test_the_constant_floor_holds_only_while_no_order_of_the_largest_size_is_known() -> None:
    mix = Mix(whole_node_floor=0.02)
    ordered(Recent(mix), *[SINGLE, PAIR] * 50, EIGHT)
    # 101 looks at 101 orders: (1 + 1) / (101 + 2) is below the floor, and stands.
    assert mix.floor_share("a", 8) == pytest.approx(2 / 103 - 1 / 101)


def test_orders_of_the_largest_size_in_every_other_look_leave_nothing_assumed() -> None:
    mix = Mix()
    ordered(Recent(mix), *[SINGLE, EIGHT] * 10)
    assert mix.floor_share("a", 8) == 0.0
