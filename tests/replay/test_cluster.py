"""The replay cluster: what an order takes and gives back, and which nodes fit an order."""

from __future__ import annotations

import pytest

from gpu_binder.replay.cluster import PlacementError, ReplayCluster

from .make import node, order


def test_placing_an_order_takes_its_gpus_cpu_and_memory() -> None:
    cluster = ReplayCluster([node("n0", gpus=4, cpu=10_000, mem=20_000)])
    cluster.place(order(gpus=3, cpu=4_000, mem=5_000), "n0")
    assert (cluster.free_gpus[0], cluster.free_cpu[0], cluster.free_mem[0]) == (1, 6_000, 15_000)
    assert cluster.allocated_gpus == 3
    assert cluster.model_free == {"A": 1}


def test_removing_an_order_gives_back_what_it_took() -> None:
    cluster = ReplayCluster([node("n0", gpus=4, cpu=10_000, mem=20_000)])
    vm = order(gpus=3, cpu=4_000, mem=5_000)
    cluster.place(vm, "n0")
    cluster.remove(vm, "n0")
    assert (cluster.free_gpus[0], cluster.free_cpu[0], cluster.free_mem[0]) == (4, 10_000, 20_000)
    assert cluster.allocated_gpus == 0


def test_removing_more_than_a_node_holds_is_refused() -> None:
    cluster = ReplayCluster([node("n0", gpus=4)])
    with pytest.raises(PlacementError, match="is not on node n0"):
        cluster.remove(order(gpus=1), "n0")


def test_placing_an_order_where_it_does_not_fit_is_refused() -> None:
    cluster = ReplayCluster([node("n0", gpus=1)])
    with pytest.raises(PlacementError, match="does not fit on node n0"):
        cluster.place(order(gpus=2), "n0")


def test_a_node_short_of_cpu_does_not_fit() -> None:
    cluster = ReplayCluster([node("n0", cpu=1_000), node("n1", cpu=2_000)])
    assert [g.members for g in cluster.feasible_groups(order(cpu=2_000))] == [[1]]


def test_a_node_short_of_memory_does_not_fit() -> None:
    cluster = ReplayCluster([node("n0", mem=1_000), node("n1", mem=2_000)])
    assert [g.members for g in cluster.feasible_groups(order(mem=2_000))] == [[1]]


def test_a_node_short_of_gpus_does_not_fit() -> None:
    cluster = ReplayCluster([node("n0", gpus=2), node("n1", gpus=4)])
    assert [g.members for g in cluster.feasible_groups(order(gpus=3))] == [[1]]


def test_a_node_of_a_model_the_order_does_not_accept_does_not_fit() -> None:
    cluster = ReplayCluster([node("n0", model="T4"), node("n1", model="G2")])
    assert [g.model for g in cluster.feasible_groups(order(models=frozenset({"G2"})))] == ["G2"]


def test_a_full_node_fits_nothing() -> None:
    cluster = ReplayCluster([node("n0", gpus=1)])
    cluster.place(order(), "n0")
    assert cluster.feasible_groups(order()) == []


def test_nodes_in_the_same_state_form_one_group_in_node_order() -> None:
    cluster = ReplayCluster([node("n0"), node("n1"), node("n2")])
    cluster.place(order(), "n1")
    groups = sorted(cluster.groups(), key=lambda g: g.free_gpus)
    assert [(g.free_gpus, g.members) for g in groups] == [(7, [1]), (8, [0, 2])]


def test_groups_follow_the_cluster_model_order_whatever_the_order_lists() -> None:
    cluster = ReplayCluster([node(f"n{m}", model=m) for m in "EDCBA"])
    found = cluster.feasible_groups(order(models=frozenset("ABCDE")))
    assert [g.model for g in found] == list("EDCBA")


def test_an_order_without_gpus_cannot_be_made() -> None:
    with pytest.raises(ValueError, match="an order needs one"):
        order(gpus=0)
