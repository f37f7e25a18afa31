"""The order mix: orders counted as they come and go, fragmentation of a free state, and
which orders need a class instead of another (the claims they make: test_claims)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.placement.mix import Demand, Mix

from .mixes import AB, BIG_A, BIG_AB, SMALL, A, B, mix_of, shaped


def test_a_free_state_strands_the_gpus_no_order_of_the_mix_fits() -> None:
    m = mix_of(Demand(1, 0, 0, A), Demand(4, 0, 0, A))
    assert m.fragmentation("a", 4, 10, 10, whole=0) == 0.0  # both orders fit
    assert m.fragmentation("a", 3, 10, 10, whole=0) == pytest.approx(3 * 0.5)
    assert m.fragmentation("b", 4, 10, 10, whole=0) == 4.0  # no order accepts class b


def test_cpu_and_memory_count_in_what_fits() -> None:
    m = mix_of(Demand(1, 8_000, 100, A))
    assert m.fragmentation("a", 1, 8_000, 100, whole=0) == 0.0
    assert m.fragmentation("a", 1, 7_999, 100, whole=0) == 1.0
    assert m.fragmentation("a", 1, 8_000, 99, whole=0) == 1.0


def test_gpus_the_order_leaves_without_cpu_or_memory_are_stranded() -> None:
    # The mix averages 8 cores and 100 bytes per GPU.
    m = mix_of(Demand(1, 8_000, 100, A))
    assert m.fragmentation("a", 3, 24_000, 300, whole=0) == 0.0
    # The order fits, but leaves 4 cores for the other two GPUs: enough for half of one.
    assert m.fragmentation("a", 3, 12_000, 300, whole=0) == pytest.approx(1.5)
    # Memory likewise: 50 bytes left feed half a GPU.
    assert m.fragmentation("a", 2, 16_000, 150, whole=0) == pytest.approx(0.5)


def test_a_whole_node_keeps_a_floor_of_worth_before_any_order_needs_one() -> None:
    m = mix_of(Demand(1, 0, 0, A), floor=0.1)
    whole = m.fragmentation("a", 8, 0, 0, whole=8)
    partial = m.fragmentation("a", 7, 0, 0, whole=8)
    assert whole == 0.0
    assert partial == pytest.approx(7 * 0.1)  # the floor's 8-GPU orders cannot use it


def test_a_free_state_serves_claims_only_if_a_restricted_order_fits_it() -> None:
    m = mix_of(Demand(4, 0, 0, A), Demand(1, 0, 0, AB))
    m.set_shapes({"a": frozenset({(1, 8, 8), (8, 8, 8)}), "b": frozenset({(8, 8, 8)})})
    # Only the 4-GPU orders are restricted (to a); the 1-GPU ones fit every class.
    assert m.serves_claims("a", 8, 8, 8)
    assert not m.serves_claims("a", 1, 8, 8)
    m.add(Demand(1, 0, 0, A))
    assert m.serves_claims("a", 1, 8, 8)


def test_orders_that_go_leave_the_mix() -> None:
    d = Demand(1, 0, 0, A)
    m = mix_of(d, d)
    m.remove(d)
    assert (len(m), m.gpus, m.counts) == (1, 1, {d: 1})
    m.remove(d)
    assert (len(m), m.counts, m.by_classes, m.cpu_milli) == (0, {}, {}, 0)
    with pytest.raises(ValueError):
        m.remove(d)


demands = st.builds(
    Demand,
    st.integers(1, 8),
    st.integers(0, 4).map(lambda n: n * 1000),
    st.integers(0, 4),
    st.sampled_from([A, B, AB]),
)


def churn(m: Mix, present: list[Demand], d: Demand, add: bool, rng: random.Random) -> None:
    """An order comes (d), or one of those present goes: the mix and `present` alike."""
    if add or not present:
        m.add(d)
        present.append(d)
    else:
        m.remove(present.pop(rng.randrange(len(present))))


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
        churn(m, present, d, add, rng)
        c, g, cpu, mem = rng.choice(states)
        expected = sum(1 for p in present if p.fits(c, g, cpu, mem))
        assert m.fitting(c, g, cpu, mem) == expected


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(demands, st.booleans()), max_size=60), st.randoms())
def test_cached_fragmentation_equals_a_fresh_sum_on_the_same_basis(
    changes: list[tuple[Demand, bool]], rng: random.Random
) -> None:
    m = Mix(whole_node_floor=0.0)
    present: list[Demand] = []
    for d, add in changes:
        churn(m, present, d, add, rng)
        c, g, cpu, mem = rng.choice([("a", 4, 8_000, 8), ("b", 8, 2_000, 4), ("a", 2, 0, 0)])
        got = m.fragmentation(c, g, cpu, mem, whole=0)
        if not present:
            assert got == g  # no order known: nothing could use the GPUs
            continue
        basis = m.basis
        fresh = sum(p.strands(c, g, cpu, mem, basis) for p in present) / len(present)
        assert got == pytest.approx(max(0.0, fresh))


# --- whole-node risk ----------------------------------------------------------------------


def test_orders_only_a_whole_largest_node_holds_are_counted_apart() -> None:
    m = shaped(BIG_A, BIG_AB, SMALL)
    assert m.by_whole == {A: 8, AB: 8}
    m.remove(BIG_A)
    assert m.by_whole == {AB: 8}


def test_the_unfit_share_is_the_orders_a_state_cannot_take() -> None:
    mix = mix_of(Demand(1, 0, 0, A), Demand(2, 0, 0, A), Demand(4, 0, 0, A), Demand(1, 0, 0, B))
    assert mix.unfit_share("a", 2, 10**9, 10**9, 0) == pytest.approx(0.5)


def test_below_a_whole_node_the_floor_share_cannot_be_taken_either() -> None:
    # No order of the mix needs all 8 GPUs, so the floor's assumed 8-GPU orders count.
    mix = mix_of(Demand(1, 0, 0, A), floor=0.1)
    assert mix.unfit_share("a", 4, 10**9, 10**9, 8) == pytest.approx(0.1)
    assert mix.unfit_share("a", 8, 10**9, 10**9, 8) == pytest.approx(0.0)


def test_a_class_is_needed_instead_of_another_by_an_order_that_holds_it_and_not_the_other() -> None:
    mix = Mix()
    mix.add(Demand(1, 0, 0, frozenset({"a", "b"})), 5)
    assert not mix.needs_instead("b", "a")
    mix.add(Demand(1, 0, 0, frozenset({"b"})))
    assert mix.needs_instead("b", "a")
    assert not mix.needs_instead("a", "b")


def test_an_order_no_node_shape_of_the_other_class_holds_needs_its_class_instead() -> None:
    # The order accepts both classes, but only b has nodes big enough for 8 GPUs.
    mix = Mix()
    mix.set_shapes({"a": frozenset({(2, 64_000, 0)}), "b": frozenset({(8, 64_000, 0)})})
    mix.add(Demand(8, 0, 0, frozenset({"a", "b"})))
    assert mix.needs_instead("b", "a")


def test_an_order_needs_a_class_instead_only_in_the_pools_that_hold_it() -> None:
    # Only b's 8-GPU nodes hold the 8-GPU order; b's 1-GPU nodes are no use to it.
    mix = Mix()
    one, eight = (1, 64_000, 0), (8, 64_000, 0)
    mix.set_shapes({"a": frozenset({(2, 64_000, 0)}), "b": frozenset({one, eight})})
    mix.add(Demand(8, 0, 0, frozenset({"a", "b"})))
    assert mix.needs_instead("b", "a", eight)
    assert not mix.needs_instead("b", "a", one)


def test_an_order_every_class_holds_claims_the_pools_that_hold_it() -> None:
    # Sweep draw 11006 in small: every class has a node with the memory for a 60 GiB
    # single, but a's 1-GPU nodes of 48 GiB do not hold it, so it claims the other pools.
    m = mix_of(Demand(1, 0, 60, AB))
    m.set_shapes({"a": frozenset({(1, 0, 48), (8, 0, 1536)}), "b": frozenset({(4, 0, 128)})})
    assert m.pools(Demand(1, 0, 60, AB)) == (("a", 8, 0, 1536), ("b", 4, 0, 128))
    assert m.serves_claims("b", 4, 0, 128)


def test_an_order_every_pool_holds_claims_nothing() -> None:
    m = mix_of(Demand(1, 0, 24, AB))
    m.set_shapes({"a": frozenset({(1, 0, 48), (8, 0, 1536)}), "b": frozenset({(4, 0, 128)})})
    assert m.pools(Demand(1, 0, 24, AB)) == ()
    assert not m.serves_claims("b", 4, 0, 128)
