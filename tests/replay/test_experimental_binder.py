"""The experimental binder policy: scarce models stay for the orders that need them."""

from __future__ import annotations

import random

import pytest

from gpu_binder.replay.cluster import ReplayCluster
from gpu_binder.replay.experimental_binder import (
    constrained_claims,
    experimental_binder_policy,
    model_pressure,
)

from .make import node, order

T4 = frozenset({"T4"})


def test_orders_restricted_to_models_claim_them_by_capacity() -> None:
    workload = [order(gpus=2, models=frozenset({"T4", "G2"})), order(gpus=1, models=T4), order()]
    claims = constrained_claims(workload, {"T4": 1, "G2": 3})
    assert claims == pytest.approx({"T4": (0.5 + 1) / 4, "G2": 1.5 / 4})


def test_pressure_grows_as_a_claimed_model_fills_up() -> None:
    cluster = ReplayCluster([node("t", gpus=2, model="T4"), node("g", gpus=2, model="G2")])
    claims = {"T4": 0.25, "G2": 0.0}
    assert model_pressure(claims, cluster) == {"T4": 0.5, "G2": 0.0}
    cluster.place(order(models=T4), "t")
    assert model_pressure(claims, cluster) == {"T4": 0.75, "G2": 0.0}


def test_an_order_for_any_model_avoids_the_model_others_can_only_use() -> None:
    workload = [order(models=T4), order()]
    cluster = ReplayCluster([node("t", gpus=2, model="T4"), node("g", gpus=2, model="G2")])
    choose = experimental_binder_policy(workload)
    assert choose(order(), cluster, random.Random(0)) == "g"


def test_on_one_model_it_keeps_a_free_pair_whole() -> None:
    workload = [order(gpus=1), order(gpus=2)]
    cluster = ReplayCluster([node("n0", gpus=2), node("n1", gpus=3)])
    choose = experimental_binder_policy(workload)
    assert choose(order(gpus=1), cluster, random.Random(0)) == "n1"
