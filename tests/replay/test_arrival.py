"""Arrival mode: draws up to 130% of capacity, figures taken when arrivals reach 100%."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpu_binder.replay.arrival import draw_arrivals, run_arrival, shuffled_nodes, until_full
from gpu_binder.replay.baselines import firstfit_policy, random_policy
from gpu_binder.replay.policy import policy_run

from .make import node, order

ONE_NODE = [node("n0", gpus=4)]


def test_arrivals_are_drawn_until_they_request_130_percent_of_capacity() -> None:
    arrivals = draw_arrivals([order(gpus=1), order(gpus=2)], capacity_gpus=100, seed=42)
    requested = sum(vm.gpus for vm in arrivals)
    # The last draw may overshoot by less than its own GPU count (at most 2 here).
    assert 130 <= requested < 130 + 2


def test_figures_are_taken_when_arrived_requests_reach_capacity() -> None:
    arrivals = [order(name=f"vm{i}") for i in range(6)]
    result = run_arrival(ONE_NODE, arrivals, policy_run(firstfit_policy), seed=42)
    assert (result.arrived_orders, result.unallocated_gpus, result.rejected_orders) == (4, 0, 0)
    assert result.rejected_orders_total == 2


def test_the_order_that_reaches_capacity_counts_even_when_rejected() -> None:
    arrivals = [order(), order(), order(), order(gpus=2), order()]
    result = run_arrival(ONE_NODE, arrivals, policy_run(firstfit_policy), seed=42)
    assert (result.arrived_orders, result.unallocated_gpus, result.rejected_orders) == (4, 1, 1)
    assert result.unallocated_gpu_pct == 25.0


def test_until_full_keeps_the_arrivals_up_to_the_one_reaching_capacity() -> None:
    arrivals = [order(gpus=2), order(gpus=3), order(gpus=1)]
    assert until_full(arrivals, capacity_gpus=4) == arrivals[:2]


def test_the_curve_records_unallocated_gpus_at_each_percent_of_arrivals() -> None:
    arrivals = [order(gpus=1) for _ in range(5)]
    curve = run_arrival(ONE_NODE, arrivals, policy_run(firstfit_policy), seed=42).curve
    assert curve[24] == (25.0, 75.0)
    assert curve[99] == (100.0, 0.0)
    assert len(curve) == 125


def test_the_node_order_is_shuffled_per_seed_and_repeats_for_a_seed() -> None:
    nodes = [node(f"n{i}") for i in range(20)]
    assert shuffled_nodes(nodes, 42) == shuffled_nodes(nodes, 42)
    assert shuffled_nodes(nodes, 42) != shuffled_nodes(nodes, 43)


def test_a_seed_draws_the_same_arrivals_every_time() -> None:
    workload = [order(gpus=g, name=f"vm{g}") for g in (1, 2, 4, 8)]
    assert draw_arrivals(workload, 64, seed=7) == draw_arrivals(workload, 64, seed=7)
    assert draw_arrivals(workload, 64, seed=7) != draw_arrivals(workload, 64, seed=8)


def test_a_random_run_repeats_for_a_seed() -> None:
    nodes = [node(f"n{i}", gpus=2, model="AB"[i % 2]) for i in range(30)]
    workload = [order(gpus=1), order(gpus=2, cpu=30_000), order(models=frozenset({"A"}))]
    arrivals = draw_arrivals(workload, 60, seed=42)
    first = run_arrival(nodes, arrivals, policy_run(random_policy), workload=workload, seed=42)
    again = run_arrival(nodes, arrivals, policy_run(random_policy), workload=workload, seed=42)
    assert (first.curve, first.rejected_orders_total) == (again.curve, again.rejected_orders_total)


RUN_IN_CHILD = """
from gpu_binder.replay.arrival import draw_arrivals, run_arrival
from gpu_binder.replay.baselines import random_policy
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import policy_run
from gpu_binder.replay.trace import Node
nodes = [Node(f"n{i}", 64000, 256000, 2, "ABCDEFG"[i % 7]) for i in range(70)]
models = frozenset("ABCDEF")
workload = [Order("a", 1, 1000, 1000), Order("b", 1, 1000, 1000, models)]
arrivals = draw_arrivals(workload, 140, seed=42)
print(run_arrival(nodes, arrivals, policy_run(random_policy), 42, workload).curve)
"""


def test_a_run_does_not_depend_on_the_interpreter_hash_seed() -> None:
    def run(hash_seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        src = str(Path(__file__).resolve().parents[2] / "src")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-c", RUN_IN_CHILD], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("1") == run("2")
