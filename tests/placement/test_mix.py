"""The order mix: fragmentation of a free state and claims on classes, kept as orders
come and go."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.placement.mix import Demand, Mix, pressures

A, B = frozenset({"a"}), frozenset({"b"})
AB = A | B


def mix_of(*demands: Demand, floor: float = 0.0) -> Mix:
    m = Mix(whole_node_floor=floor)
    for d in demands:
        m.add(d)
    return m


def test_a_free_state_strands_the_gpus_no_order_of_the_mix_fits() -> None:
    m = mix_of(Demand(1, 0, 0, A), Demand(4, 0, 0, A))
    assert m.fragmentation("a", 4, 10, 10, whole=0) == 0.0  # both orders fit
    assert m.fragmentation("a", 3, 10, 10, whole=0) == pytest.approx(3 * 0.5)
    assert m.fragmentation("b", 4, 10, 10, whole=0) == 4.0  # no order accepts class b


def test_cpu_and_memory_count_in_what_fits() -> None:
    m = mix_of(Demand(1, 8_000, 100, A))
    assert m.fragmentation("a", 2, 8_000, 100, whole=0) == 0.0
    assert m.fragmentation("a", 2, 7_999, 100, whole=0) == 2.0
    assert m.fragmentation("a", 2, 8_000, 99, whole=0) == 2.0


def test_a_whole_node_keeps_a_floor_of_worth_before_any_order_needs_one() -> None:
    m = mix_of(Demand(1, 0, 0, A), floor=0.1)
    whole = m.fragmentation("a", 8, 0, 0, whole=8)
    partial = m.fragmentation("a", 7, 0, 0, whole=8)
    assert whole == 0.0
    assert partial == pytest.approx(7 * 0.1)  # the floor's 8-GPU orders cannot use it


def test_restricted_orders_claim_their_classes_by_capacity() -> None:
    m = mix_of(Demand(2, 0, 0, AB), Demand(1, 0, 0, A), Demand(1, 0, 0, frozenset({"a", "b", "c"})))
    claims = m.claims({"a": 1, "b": 3, "c": 4})
    # {a,b} claims 2 GPUs split 1:3; {a} claims 1; {a,b,c} accepts every class: nothing.
    assert claims == pytest.approx({"a": (0.5 + 1) / 4, "b": 1.5 / 4, "c": 0.0})


def test_pressure_grows_as_a_claimed_class_fills_up() -> None:
    claims = {"a": 0.25, "b": 0.0}
    assert pressures(claims, {"a": 2, "b": 2}, 4) == {"a": 0.5, "b": 0.0}
    assert pressures(claims, {"a": 1, "b": 2}, 3) == {"a": 0.75, "b": 0.0}


def test_orders_that_go_leave_the_mix() -> None:
    d = Demand(1, 0, 0, A)
    m = mix_of(d, d)
    m.remove(d)
    assert (len(m), m.gpus, m.counts) == (1, 1, {d: 1})
    m.remove(d)
    assert (len(m), m.counts, m.by_classes) == (0, {}, {})
    with pytest.raises(ValueError):
        m.remove(d)


demands = st.builds(
    Demand,
    st.integers(1, 8),
    st.integers(0, 4).map(lambda n: n * 1000),
    st.integers(0, 4),
    st.sampled_from([A, B, AB]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(demands, st.booleans()), max_size=60), st.randoms())
def test_cached_answers_equal_a_fresh_count_whatever_came_and_went(
    changes: list[tuple[Demand, bool]], rng: random.Random
) -> None:
    m = Mix()
    present: list[Demand] = []
    states = [
        (c, g, cpu * 1000, mem)
        for c in "ab"
        for g in (1, 4, 8)
        for cpu in (0, 2, 4)
        for mem in (0, 4)
    ]
    for d, add in changes:
        if add or not present:
            m.add(d)
            present.append(d)
        else:
            m.remove(present.pop(rng.randrange(len(present))))
        c, g, cpu, mem = rng.choice(states)
        expected = sum(1 for p in present if p.fits(c, g, cpu, mem))
        assert m.fitting(c, g, cpu, mem) == expected
