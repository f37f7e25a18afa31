"""The model-capacity bound: a max flow of GPUs from orders to the models they accept."""

from __future__ import annotations

import pytest

from gpu_binder.replay.bound import (
    demand_by_fitting_models,
    demand_by_models,
    max_servable_gpus,
    unallocated_bound_pct,
)

from .make import node, order

A, B = frozenset({"A"}), frozenset({"B"})
ANY: frozenset[str] = frozenset()


def test_orders_group_by_the_models_they_accept() -> None:
    orders = [order(gpus=2, models=A), order(gpus=1, models=A), order(gpus=8)]
    assert demand_by_models(orders) == {A: 3, ANY: 8}


def test_orders_of_a_model_beyond_its_capacity_leave_the_rest_unallocated() -> None:
    # B holds 2 of the 4 B-only GPUs; the one order for any model fills 1 of A's 4.
    demand = {B: 4, ANY: 1}
    capacity = {"A": 4, "B": 2}
    assert max_servable_gpus(demand, capacity) == 3
    assert unallocated_bound_pct(demand, capacity) == pytest.approx(50.0)


def test_flexible_orders_are_routed_around_the_model_others_need() -> None:
    # Greedy would give A to the flexible orders first and serve 4; the flow serves all 6.
    demand = {frozenset({"A", "B"}): 2, A: 4}
    assert max_servable_gpus(demand, {"A": 4, "B": 2}) == 6
    assert unallocated_bound_pct(demand, {"A": 4, "B": 2}) == 0.0


def test_orders_for_a_model_the_cluster_lacks_are_never_served() -> None:
    assert max_servable_gpus({frozenset({"Z"}): 3, ANY: 1}, {"A": 4}) == 1


def test_no_demand_leaves_everything_unallocated() -> None:
    assert unallocated_bound_pct({}, {"A": 4}) == 100.0


def test_the_fitting_bound_drops_orders_that_no_node_of_their_models_could_hold() -> None:
    nodes = [node("a", gpus=8, model="A", cpu=96_000), node("b", gpus=8, model="B", cpu=128_000)]
    big = order(gpus=8, cpu=120_000)
    assert demand_by_fitting_models([big], nodes) == {B: 8}
    assert demand_by_fitting_models([order(gpus=8, cpu=120_000, models=A)], nodes) == {}
