"""What the orders of the mix claim of each class and pool as the cluster fills (pressure,
the prior's part), and the risk of breaking a whole node."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_binder.placement.claims import (
    poisson_at_least,
    pool_pressures,
    pressures,
    prior_split,
    whole_risks,
)
from gpu_binder.placement.mix import Demand, Mix
from gpu_binder.placement.recent import Recent

from .mixes import AB, BIG_A, BIG_AB, SMALL, A, mix_of, shaped

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_restricted_orders_press_the_classes_they_accept() -> None:
    m = mix_of(Demand(2, 0, 0, AB), Demand(1, 0, 0, A), Demand(1, 0, 0, frozenset({"a", "b", "c"})))
    pressure = pressures(m, {"a": 1, "b": 3, "c": 4}, {"a": 1, "b": 3, "c": 4})
    # Of 8 free GPUs, {a} orders ask 2 (all of a's 1: pressure 2), then {a,b} orders ask 4
    # from b, the least claimed; {a,b,c} accepts every class and asks nothing.
    assert pressure == pytest.approx({"a": 2.0, "b": 4 / 3, "c": 0.0})


def test_pressure_grows_as_a_claimed_class_fills_up() -> None:
    # A quarter of the ordered GPUs can only use a; the rest may go anywhere.
    m = mix_of(Demand(1, 0, 0, A), Demand(3, 0, 0, AB))
    capacity = {"a": 2, "b": 2}
    assert pressures(m, capacity, {"a": 2, "b": 2}) == {"a": 0.5, "b": 0.0}
    assert pressures(m, capacity, {"a": 1, "b": 2}) == {"a": 0.75, "b": 0.0}


def test_a_class_every_restricted_order_of_another_accepts_is_never_cheaper() -> None:
    # {a} orders need a alone; {a,b} orders take either. However b fills up, a stays at
    # least as pressed (splitting the {a,b} claims by capacity made b the dearer one).
    m = mix_of(Demand(1, 0, 0, A), Demand(4, 0, 0, AB), Demand(5, 0, 0, frozenset({"a", "b", "c"})))
    capacity = {"a": 8, "b": 8, "c": 4}
    for free_b in (8, 4, 2, 1):
        pressure = pressures(m, capacity, {"a": 8, "b": free_b, "c": 4})
        assert pressure["a"] >= pressure["b"] > 0.0


def test_no_whole_node_is_at_risk_while_they_far_outnumber_the_orders_needing_them() -> None:
    m = shaped(BIG_A, *[SMALL] * 99)
    risks = whole_risks(m, {"a": 80, "b": 80}, {"a": 80, "b": 80}, {"a": 8, "b": 8})
    assert risks["a"] < 1e-4
    assert risks["b"] == 0.0


def test_a_class_with_few_whole_nodes_left_is_at_more_risk_at_the_same_claims() -> None:
    # Balanced, the big orders claim a and b alike per GPU; but a has 2 whole nodes and b
    # 20, and a small count of arrivals varies the most.
    m = shaped(*[BIG_A] * 2, *[BIG_AB] * 20, *[SMALL] * 60)
    whole = {"a": 16, "b": 160}
    risks = whole_risks(m, {"a": 16, "b": 160}, whole, {"a": 8, "b": 8})
    assert risks["a"] > risks["b"] > 0.0


def test_a_class_without_whole_nodes_has_no_risk_to_price() -> None:
    m = shaped(BIG_A, BIG_AB)
    assert whole_risks(m, {"a": 4, "b": 16}, {"a": 0, "b": 16}, {"a": 8, "b": 8}).keys() == {"b"}


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
    pressure = pool_pressures(m, {small: 100, big: 100, other: 200})
    # Half the GPUs ordered are restricted: half of the 400 free, all on big's 100.
    assert pressure == {small: 0.0, big: pytest.approx(2.0), other: 0.0}


def test_a_class_s_largest_pools_carry_the_whole_node_floor_s_claim() -> None:
    # No order of 8 GPUs is known: the floor's assumed 8-GPU orders (2% of the orders)
    # claim each class's 8-GPU pool, and nothing of a's 1-GPU pool.
    m = mix_of(*[Demand(1, 0, 0, AB)] * 9, Demand(1, 0, 96, A), floor=0.02)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = pool_pressures(m, {small: 100, big: 100, other: 200})
    # Of the 400 free, the 96-memory order claims 1/10 and each class's floor
    # 0.02 × 8 × 10 orders / 10 GPUs ordered.
    assert pressure[small] == 0.0
    assert pressure[big] == pytest.approx((40 + 0.16 * 400) / 100)
    assert pressure[other] == pytest.approx(0.16 * 400 / 200)


def test_once_an_order_of_the_largest_size_is_known_the_floor_claims_nothing() -> None:
    m = mix_of(Demand(8, 0, 0, AB), Demand(1, 0, 96, A), floor=0.02)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    big = ("a", 8, 8, 768)
    small = ("a", 1, 8, 32)
    pressure = pool_pressures(m, {small: 100, big: 100, ("b", 8, 8, 768): 200})
    # Only the orders' claims: the 96-memory order's 1 of the 9 GPUs ordered on a's
    # 8-GPU pool, and the 8-GPU order's 8 (no 1-GPU node holds it) on both 8-GPU pools,
    # balanced: all 400 free GPUs claimed of the 300 there. None on the 1-GPU pool.
    assert pressure[small] == 0.0
    assert pressure[big] == pytest.approx(400 / 300)


def test_the_first_order_of_the_largest_size_known_keeps_the_floor_s_claim_on_its_pool() -> None:
    # 99 singles, one look, then an 8-GPU order only a's 8-GPU pool holds. Ended at once,
    # the floor's claim there fell to the one order's 8 of the 107 GPUs ordered (sweep
    # draw 1); counted toward it, two looks at 100 orders assume (1 + 50) / (100 + 100)
    # of the orders are of 8 GPUs, the known one included.
    m = Mix(whole_node_floor=0.1, class_prior=0.0)
    recent = Recent(m)
    m.set_shapes({"a": frozenset({(1, 0, 0), (8, 0, 0)}), "b": frozenset({(1, 0, 0)})})
    small, big, other = ("a", 1, 0, 0), ("a", 8, 0, 0), ("b", 1, 0, 0)
    for i in range(99):
        recent.set(f"single-{i}", T0, (Demand(1, 0, 0, AB),))
    recent.set("eight", T0 + timedelta(minutes=1), (Demand(8, 0, 0, A),))
    pressure = pool_pressures(m, {small: 100, big: 100, other: 200})
    assert pressure[big] == pytest.approx(400 * (51 / 200 * 8 * 100 / 107) / 100)
    assert pressure[small] == pressure[other] == 0.0


def test_before_any_restricted_order_the_prior_claims_an_equal_part_for_each_class() -> None:
    # A tenth of the 72 free GPUs is assumed to go to orders only one class serves, 3.6
    # per class: a larger share of the smaller class.
    m = mix_of(Demand(1, 0, 0, AB), prior=0.1)
    pressure = pressures(m, {"a": 8, "b": 64}, {"a": 8, "b": 64})
    assert pressure == pytest.approx({"a": 3.6 / 8, "b": 3.6 / 64})


def test_with_one_class_the_prior_claims_nothing() -> None:
    # No order needs the one class rather than another; a price there would only weigh
    # the GPUs stranded on it again (see policy.claim_cost).
    m = mix_of(Demand(1, 0, 0, A), prior=0.1)
    assert pressures(m, {"a": 8}, {"a": 8}) == {"a": 0.0}


def test_the_prior_is_split_as_the_known_restricted_orders_are() -> None:
    # One average order (1 GPU) per class for the even guess, and eight a-only GPUs.
    m = mix_of(Demand(1, 0, 0, AB), *[Demand(1, 0, 0, A)] * 8, prior=0.1)
    assert prior_split(m, AB) == pytest.approx({"a": 0.9, "b": 0.1})


def test_an_order_restricted_to_two_classes_counts_half_for_each() -> None:
    c = frozenset({"c"})
    m = mix_of(Demand(2, 0, 0, AB), Demand(2, 0, 0, AB | c), prior=0.1)
    assert prior_split(m, AB | c) == pytest.approx({"a": 3 / 8, "b": 3 / 8, "c": 2 / 8})


def test_the_prior_adds_to_the_known_claims() -> None:
    # Half the GPUs ordered need a: 4 of the 8 free; the prior's 0.8 is split 2:1.
    m = mix_of(Demand(1, 0, 0, A), Demand(1, 0, 0, AB), prior=0.1)
    pressure = pressures(m, {"a": 4, "b": 4}, {"a": 4, "b": 4})
    assert pressure == pytest.approx({"a": (4 + 0.8 * 2 / 3) / 4, "b": 0.8 / 3 / 4})


def test_the_prior_s_known_part_falls_on_the_pools_that_hold_the_known_orders() -> None:
    # The 96-memory orders claim a's 8-GPU pool alone, with or without the prior. Of the
    # prior's 40 GPUs, split 2:1, a's part is its pseudo-order (1 GPU, over both of a's
    # pools by free GPUs) and the known 1 GPU (on the 8-GPU pool only): 1/4 and 3/4.
    m = mix_of(Demand(1, 0, 96, A), Demand(1, 0, 8, AB), prior=0.1)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = pool_pressures(m, {small: 100, big: 100, other: 200})
    a_prior = 40 * 2 / 3
    assert pressure == pytest.approx(
        {small: a_prior / 4 / 100, big: 2.0 + a_prior * 3 / 4 / 100, other: 40 / 3 / 200}
    )


def test_without_known_restricted_orders_the_prior_spreads_over_a_class_s_pools_by_free_gpus() -> (
    None
):
    m = mix_of(Demand(1, 0, 8, AB), prior=0.1)
    m.set_shapes({"a": frozenset({(1, 8, 32), (8, 8, 768)}), "b": frozenset({(8, 8, 768)})})
    small, big, other = ("a", 1, 8, 32), ("a", 8, 8, 768), ("b", 8, 8, 768)
    pressure = pool_pressures(m, {small: 100, big: 300, other: 200})
    # Of the 600 free, 30 GPUs per class, over a's 400 free and b's 200.
    assert pressure == pytest.approx({small: 30 / 400, big: 30 / 400, other: 30 / 200})
