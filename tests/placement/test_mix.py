"""The order mix: fragmentation of a free state and pressure on classes, kept as orders
come and go."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_binder.placement.mix import Demand, Mix, poisson_at_least

A, B = frozenset({"a"}), frozenset({"b"})
AB = A | B


def mix_of(*demands: Demand, floor: float = 0.0, prior: float = 0.0) -> Mix:
    m = Mix(whole_node_floor=floor, class_prior=prior)
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


def test_restricted_orders_press_the_classes_they_accept() -> None:
    m = mix_of(Demand(2, 0, 0, AB), Demand(1, 0, 0, A), Demand(1, 0, 0, frozenset({"a", "b", "c"})))
    pressure = m.pressures({"a": 1, "b": 3, "c": 4}, {"a": 1, "b": 3, "c": 4})
    # Of 8 free GPUs, {a} orders ask 2 (all of a's 1: pressure 2), then {a,b} orders ask 4
    # from b, the least claimed; {a,b,c} accepts every class and asks nothing.
    assert pressure == pytest.approx({"a": 2.0, "b": 4 / 3, "c": 0.0})


def test_pressure_grows_as_a_claimed_class_fills_up() -> None:
    # A quarter of the ordered GPUs can only use a; the rest may go anywhere.
    m = mix_of(Demand(1, 0, 0, A), Demand(3, 0, 0, AB))
    capacity = {"a": 2, "b": 2}
    assert m.pressures(capacity, {"a": 2, "b": 2}) == {"a": 0.5, "b": 0.0}
    assert m.pressures(capacity, {"a": 1, "b": 2}) == {"a": 0.75, "b": 0.0}


def test_a_class_every_restricted_order_of_another_accepts_is_never_cheaper() -> None:
    # {a} orders need a alone; {a,b} orders take either. However b fills up, a stays at
    # least as pressed (splitting the {a,b} claims by capacity made b the dearer one).
    m = mix_of(Demand(1, 0, 0, A), Demand(4, 0, 0, AB), Demand(5, 0, 0, frozenset({"a", "b", "c"})))
    capacity = {"a": 8, "b": 8, "c": 4}
    for free_b in (8, 4, 2, 1):
        pressure = m.pressures(capacity, {"a": 8, "b": free_b, "c": 4})
        assert pressure["a"] >= pressure["b"] > 0.0


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

# Two classes of 8-GPU nodes: a's hold 120-core orders, b's do not.
SHAPES = {"a": frozenset({(8, 128_000, 0)}), "b": frozenset({(8, 96_000, 0)})}
BIG_A = Demand(8, 120_000, 0, AB)  # only a's nodes are big enough
BIG_AB = Demand(8, 88_000, 0, AB)
SMALL = Demand(1, 1_000, 0, AB)


def shaped(*demands: Demand) -> Mix:
    m = mix_of(*demands)
    m.set_shapes(SHAPES)
    return m


def test_orders_only_a_whole_largest_node_holds_are_counted_apart() -> None:
    m = shaped(BIG_A, BIG_AB, SMALL)
    assert m.by_whole == {A: 8, AB: 8}
    m.remove(BIG_A)
    assert m.by_whole == {AB: 8}


def test_no_whole_node_is_at_risk_while_they_far_outnumber_the_orders_needing_them() -> None:
    m = shaped(BIG_A, *[SMALL] * 99)
    risks = m.whole_risks({"a": 80, "b": 80}, {"a": 80, "b": 80}, {"a": 8, "b": 8})
    assert risks["a"] < 1e-4
    assert risks["b"] == 0.0


def test_a_class_with_few_whole_nodes_left_is_at_more_risk_at_the_same_claims() -> None:
    # Balanced, the big orders claim a and b alike per GPU; but a has 2 whole nodes and b
    # 20, and a small count of arrivals varies the most.
    m = shaped(*[BIG_A] * 2, *[BIG_AB] * 20, *[SMALL] * 60)
    whole = {"a": 16, "b": 160}
    risks = m.whole_risks({"a": 16, "b": 160}, whole, {"a": 8, "b": 8})
    assert risks["a"] > risks["b"] > 0.0


def test_a_class_without_whole_nodes_has_no_risk_to_price() -> None:
    m = shaped(BIG_A, BIG_AB)
    assert m.whole_risks({"a": 4, "b": 16}, {"a": 0, "b": 16}, {"a": 8, "b": 8}).keys() == {"b"}


@given(st.floats(0.0, 40.0), st.integers(0, 60))
def test_poisson_at_least_is_one_minus_the_distribution_below(mean: float, n: int) -> None:
    below = sum(math.exp(-mean) * mean**k / math.factorial(k) for k in range(n))
    assert poisson_at_least(mean, n) == pytest.approx(max(0.0, 1.0 - below), abs=1e-9)


@given(st.floats(1.0, 5000.0), st.integers(0, 60))
def test_poisson_at_least_falls_as_n_grows_and_is_even_at_a_large_mean(
    mean: float, step: int
) -> None:
    n = round(mean)
    assert poisson_at_least(mean, n + step) <= poisson_at_least(mean, n) + 1e-12
    if mean >= 100:
        # The median of a large Poisson is its mean: half the mass on either side.
        assert 0.45 < poisson_at_least(mean, n) < 0.55


def test_a_restricted_orders_claim_falls_on_the_pools_that_hold_it() -> None:
    # Orders asking 96 memory are restricted to a, whose 1-GPU, 32-memory nodes cannot
    # hold them: all of their claim falls on a's 8-GPU nodes, none on its 1-GPU ones.
    m = mix_of(Demand(1, 0, 96, A), Demand(1, 0, 8, AB))
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = m.pool_pressures({small: 100, big: 100, other: 200})
    # Half the GPUs ordered are restricted: half of the 400 free, all on big's 100.
    assert pressure == {small: 0.0, big: pytest.approx(2.0), other: 0.0}


def test_the_unfit_share_is_the_orders_a_state_cannot_take() -> None:
    mix = mix_of(Demand(1, 0, 0, A), Demand(2, 0, 0, A), Demand(4, 0, 0, A), Demand(1, 0, 0, B))
    assert mix.unfit_share("a", 2, 10**9, 10**9, 0) == pytest.approx(0.5)


def test_below_a_whole_node_the_floor_share_cannot_be_taken_either() -> None:
    # No order of the mix needs all 8 GPUs, so the floor's assumed 8-GPU orders count.
    mix = mix_of(Demand(1, 0, 0, A), floor=0.1)
    assert mix.unfit_share("a", 4, 10**9, 10**9, 8) == pytest.approx(0.1)
    assert mix.unfit_share("a", 8, 10**9, 10**9, 8) == pytest.approx(0.0)


def test_a_class_s_largest_pools_carry_the_whole_node_floor_s_claim() -> None:
    # No order of 8 GPUs is known: the floor's assumed 8-GPU orders (2% of the orders)
    # claim each class's 8-GPU pool, and nothing of a's 1-GPU pool.
    m = mix_of(*[Demand(1, 0, 0, AB)] * 9, Demand(1, 0, 96, A), floor=0.02)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = m.pool_pressures({small: 100, big: 100, other: 200})
    # Of the 400 free, the 96-memory order claims 1/10 and each class's floor
    # 0.02 × 8 × 10 orders / 10 GPUs ordered.
    assert pressure[small] == 0.0
    assert pressure[big] == pytest.approx((40 + 0.16 * 400) / 100)
    assert pressure[other] == pytest.approx(0.16 * 400 / 200)


def test_once_an_order_of_the_largest_size_is_known_the_floor_claims_nothing() -> None:
    m = mix_of(Demand(8, 0, 0, AB), Demand(1, 0, 96, A), floor=0.02)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    big = ("a", 8, 8, 768)
    pressure = m.pool_pressures({("a", 1, 8, 32): 100, big: 100, ("b", 8, 8, 768): 200})
    # Only the 96-memory order's claim: 1 of the 9 GPUs ordered, of the 400 free.
    assert pressure[big] == pytest.approx(400 / 9 / 100)


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


def test_before_any_restricted_order_the_prior_claims_an_equal_part_for_each_class() -> None:
    # A tenth of the 72 free GPUs is assumed to go to orders only one class serves, 3.6
    # per class: a larger share of the smaller class.
    m = mix_of(Demand(1, 0, 0, AB), prior=0.1)
    pressure = m.pressures({"a": 8, "b": 64}, {"a": 8, "b": 64})
    assert pressure == pytest.approx({"a": 3.6 / 8, "b": 3.6 / 64})


def test_with_one_class_the_prior_claims_nothing() -> None:
    # No order needs the one class rather than another; a price there would only weigh
    # the GPUs stranded on it again (see policy.claim_cost).
    m = mix_of(Demand(1, 0, 0, A), prior=0.1)
    assert m.pressures({"a": 8}, {"a": 8}) == {"a": 0.0}


def test_the_prior_is_split_as_the_known_restricted_orders_are() -> None:
    # One average order (1 GPU) per class for the even guess, and eight a-only GPUs.
    m = mix_of(Demand(1, 0, 0, AB), *[Demand(1, 0, 0, A)] * 8, prior=0.1)
    assert m.prior_split(AB) == pytest.approx({"a": 0.9, "b": 0.1})


def test_an_order_restricted_to_two_classes_counts_half_for_each() -> None:
    c = frozenset({"c"})
    m = mix_of(Demand(2, 0, 0, AB), Demand(2, 0, 0, AB | c), prior=0.1)
    assert m.prior_split(AB | c) == pytest.approx({"a": 3 / 8, "b": 3 / 8, "c": 2 / 8})


def test_the_prior_adds_to_the_known_claims() -> None:
    # Half the GPUs ordered need a: 4 of the 8 free; the prior's 0.8 is split 2:1.
    m = mix_of(Demand(1, 0, 0, A), Demand(1, 0, 0, AB), prior=0.1)
    pressure = m.pressures({"a": 4, "b": 4}, {"a": 4, "b": 4})
    assert pressure == pytest.approx({"a": (4 + 0.8 * 2 / 3) / 4, "b": 0.8 / 3 / 4})


def test_the_prior_leaves_the_order_of_a_class_s_pools_to_the_known_claims() -> None:
    # The 96-memory orders claim a's 8-GPU pool alone (as without the prior); the prior's
    # 40 GPUs, split 2:1, are spread over each class's pools by their free GPUs.
    m = mix_of(Demand(1, 0, 96, A), Demand(1, 0, 8, AB), prior=0.1)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = m.pool_pressures({small: 100, big: 100, other: 200})
    a_level, b_level = 40 * 2 / 3 / 200, 40 / 3 / 200
    assert pressure == pytest.approx({small: a_level, big: 2.0 + a_level, other: b_level})
