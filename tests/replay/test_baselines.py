"""The classic policies on tiny clusters: each picks the node its rule says."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from gpu_binder.replay.baselines import (
    FragmentationGradient,
    bestfit_policy,
    fgd_online_policy,
    fgd_policy,
    firstfit_policy,
    random_policy,
    spread_policy,
)
from gpu_binder.replay.cluster import ReplayCluster
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import PolicyFactory
from gpu_binder.replay.trace import Node

from .make import node, order

ALL = [random_policy, firstfit_policy, spread_policy, bestfit_policy, fgd_policy, fgd_online_policy]


def cluster_with(nodes: Sequence[Node], *placed: tuple[Order, str]) -> ReplayCluster:
    cluster = ReplayCluster(nodes)
    for vm, where in placed:
        cluster.place(vm, where)
    return cluster


def choose(factory: PolicyFactory, cluster: ReplayCluster, vm: Order, seed: int = 0) -> str | None:
    return factory([vm])(vm, cluster, random.Random(seed))


@pytest.mark.parametrize("factory", ALL, ids=lambda f: f.__name__)
def test_every_policy_rejects_an_order_no_node_fits(factory: PolicyFactory) -> None:
    cluster = cluster_with([node("n0", gpus=2), node("n1", gpus=4, model="B")])
    assert choose(factory, cluster, order(gpus=4, models=frozenset({"A"}))) is None


@pytest.mark.parametrize("factory", ALL, ids=lambda f: f.__name__)
def test_every_policy_picks_the_only_node_that_fits(factory: PolicyFactory) -> None:
    cluster = cluster_with([node("n0", cpu=500), node("n1"), node("n2", mem=10)])
    assert choose(factory, cluster, order()) == "n1"


def test_firstfit_takes_the_first_node_in_node_order_that_fits() -> None:
    cluster = cluster_with([node("n0", gpus=1), node("n1", gpus=8), node("n2", gpus=2)])
    assert choose(firstfit_policy, cluster, order(gpus=2)) == "n1"


def test_spread_takes_the_node_with_most_free_gpus() -> None:
    cluster = cluster_with([node("n0", gpus=2), node("n1", gpus=8), node("n2", gpus=4)])
    assert choose(spread_policy, cluster, order()) == "n1"


def test_bestfit_takes_the_least_gpu_leftover_when_cpu_is_alike() -> None:
    cluster = cluster_with([node("n0", gpus=8), node("n1", gpus=2), node("n2", gpus=4)])
    assert choose(bestfit_policy, cluster, order()) == "n1"


def test_bestfit_weighs_cpu_leftover_against_the_largest_node() -> None:
    # n0 leaves 1 GPU of 8 and all 64 cores (0.5/8 + 0.5 = 0.5625); n1 leaves 3 GPUs
    # and 4 cores (0.5*3/8 + 0.5*4/64 = 0.21875): n1 fits better.
    cluster = cluster_with([node("n0", gpus=2, cpu=65_000), node("n1", gpus=4, cpu=5_000)])
    assert choose(bestfit_policy, cluster, order(cpu=1_000)) == "n1"


def test_random_picks_only_nodes_that_fit_and_each_of_them() -> None:
    cluster = cluster_with([node("n0"), node("n1", cpu=10), node("n2"), node("n3")])
    picked = {choose(random_policy, cluster, order(), seed) for seed in range(200)}
    assert picked == {"n0", "n2", "n3"}


def test_fragmentation_counts_free_gpus_a_random_order_cannot_use() -> None:
    workload = [order(gpus=1), order(gpus=2), order(gpus=2, models=frozenset({"B"}))]
    fgd = FragmentationGradient(workload)
    # On a model-A node with one free GPU, two orders in three cannot use it.
    assert fgd.fragmentation("A", 1, 64_000, 256_000) == pytest.approx(2 / 3)
    assert fgd.fragmentation("A", 2, 64_000, 256_000) == pytest.approx(2 * 1 / 3)
    assert fgd.fragmentation("A", 2, 500, 256_000) == pytest.approx(2.0)


def test_fgd_keeps_a_free_pair_whole_for_two_gpu_orders() -> None:
    workload = [order(gpus=1), order(gpus=2)]
    # Firstfit and bestfit would break n0's pair; n1 keeps two free after the order.
    cluster = cluster_with([node("n0", gpus=2), node("n1", gpus=3)])
    vm = order(gpus=1)
    assert fgd_policy(workload)(vm, cluster, random.Random(0)) == "n1"


def test_fgd_keeps_cpu_for_the_gpus_left_on_a_node() -> None:
    workload = [order(gpus=1, cpu=4_000)]
    # On n0 the order would leave a GPU with 2 cores, which no order can use.
    cluster = cluster_with([node("n0", gpus=2, cpu=6_000), node("n1", gpus=2, cpu=20_000)])
    vm = order(gpus=1, cpu=4_000)
    assert fgd_policy(workload)(vm, cluster, random.Random(0)) == "n1"


def test_online_fgd_ignores_the_workload_it_is_handed() -> None:
    # Only the 1-GPU order it is placing is known: no free GPU is stranded anywhere.
    workload = [order(gpus=1), order(gpus=2)]
    cluster = cluster_with([node("n0", gpus=2), node("n1", gpus=3)])
    assert fgd_online_policy(workload)(order(gpus=1), cluster, random.Random(0)) == "n0"


def test_online_fgd_learns_the_mix_from_the_orders_it_places() -> None:
    cluster = cluster_with([node("n0", gpus=2), node("n1", gpus=3), node("n2", gpus=4)])
    fgd, rng = fgd_online_policy([]), random.Random(0)
    assert fgd(order(gpus=1), cluster, rng) == "n0"  # not placed: only a mix of 1-GPU
    pair = order(gpus=2)
    fgd(pair, cluster, rng)
    cluster.place(pair, "n2")
    # Now a third of the orders seen are pairs: n0's pair stays whole, as FGD keeps it.
    assert fgd(order(gpus=1), cluster, rng) == "n1"


@pytest.mark.parametrize(
    "factory", [firstfit_policy, spread_policy, bestfit_policy, fgd_policy, fgd_online_policy]
)
def test_a_tie_goes_to_the_node_first_in_node_order(factory: PolicyFactory) -> None:
    cluster = cluster_with([node("n2"), node("n0"), node("n1")])
    assert choose(factory, cluster, order()) == "n2"
