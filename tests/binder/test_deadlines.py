"""Deadlines: the keys a clock makes due, found without walking every waiting key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpu_binder.binder.deadlines import Deadlines

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_key_is_due_once_its_time_has_come() -> None:
    d = Deadlines()
    d.set("ns/a", _at(5))
    assert d.due(_at(4)) == []
    assert d.due(_at(5)) == ["ns/a"]


def test_due_keys_come_earliest_first() -> None:
    d = Deadlines()
    d.set("ns/late", _at(3))
    d.set("ns/early", _at(1))
    assert d.due(_at(9)) == ["ns/early", "ns/late"]


def test_a_due_key_stays_due_until_discarded() -> None:
    d = Deadlines()
    d.set("ns/a", _at(1))
    assert d.due(_at(2)) == ["ns/a"]
    assert d.due(_at(2)) == ["ns/a"]
    d.discard("ns/a")
    assert d.due(_at(2)) == []


def test_a_key_set_anew_is_due_only_at_its_new_time() -> None:
    d = Deadlines()
    d.set("ns/a", _at(1))
    d.set("ns/a", _at(10))
    assert d.due(_at(5)) == []
    assert d.due(_at(10)) == ["ns/a"]


def test_resetting_one_key_many_times_keeps_the_heap_small() -> None:
    d = Deadlines()
    for minute in range(10_000):
        d.set("ns/a", _at(minute))
    assert len(d._heap) <= 2 * len(d) + 64


@given(
    st.lists(
        st.tuples(st.sampled_from(["set", "discard", "due"]), st.integers(0, 5), st.integers(0, 20))
    )
)
def test_due_keys_equal_a_walk_of_every_deadline(ops: list[tuple[str, int, int]]) -> None:
    d = Deadlines()
    model: dict[str, datetime] = {}
    for op, k, minute in ops:
        key = f"ns/{k}"
        if op == "set":
            d.set(key, _at(minute))
            model[key] = _at(minute)
        elif op == "discard":
            d.discard(key)
            model.pop(key, None)
        else:
            now = _at(minute)
            assert sorted(d.due(now)) == sorted(k for k, t in model.items() if t <= now)


def test_next_is_the_earliest_time_of_a_key_still_waiting() -> None:
    d = Deadlines()
    assert d.next() is None
    d.set("ns/a", _at(1))
    d.set("ns/b", _at(3))
    d.set("ns/a", _at(5))  # moved: its old time is stale
    assert d.next() == _at(3)
    d.discard("ns/b")
    assert d.next() == _at(5)
