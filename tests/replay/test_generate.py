"""Generated workloads: a draw is reproducible from its number, and its orders are what a
GPU-VM cloud sells on its cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from gpu_binder.replay import generate
from gpu_binder.replay.generate import (
    GIB,
    MIN_GPUS,
    ClusterShape,
    Flavor,
    NodeShape,
    Params,
    build_nodes,
    draw_arrivals,
    draw_params,
)
from gpu_binder.replay.order import orders_from_pods
from gpu_binder.replay.trace import load_nodes, load_pods

from .make import SHIPPED

BASE = load_nodes(SHIPPED / "openb_node_list_gpu_node.csv")
EIGHTS = NodeShape("A", 8, 96_000, 384 * GIB, 4)
SINGLES = NodeShape("B", 1, 16_000, 64 * GIB, 32)


def small(*shapes: NodeShape, **changes: object) -> Params:
    """Draw 0's mix on a small synthetic cluster (64 GPUs by default)."""
    cluster = ClusterShape("synthetic", nodes=shapes or (EIGHTS, SINGLES))
    return replace(draw_params(0), cluster=cluster, **changes)  # type: ignore[arg-type]


def test_a_draw_is_the_same_workload_every_time() -> None:
    assert draw_params(17) == draw_params(17)
    nodes = build_nodes(draw_params(17), BASE)
    assert build_nodes(draw_params(17), BASE) == nodes
    assert draw_arrivals(draw_params(17), nodes, 42) == draw_arrivals(draw_params(17), nodes, 42)


def test_draws_and_seeds_differ() -> None:
    assert draw_params(1) != draw_params(2)
    params = small()
    nodes = build_nodes(params, BASE)
    assert draw_arrivals(params, nodes, 42) != draw_arrivals(params, nodes, 43)


def test_the_gpu_mix_of_a_draw_is_shares_of_1_2_4_and_8_gpu_orders() -> None:
    for draw in range(50):
        mix = draw_params(draw).gpu_mix
        assert len(mix) == 4 and abs(sum(mix) - 1) < 1e-3 and min(mix) >= 0


def test_draws_cover_every_cluster_kind_and_arrival_process() -> None:
    params = [draw_params(d) for d in range(100)]
    assert {p.cluster.kind for p in params} == {"trace", "subset", "synthetic"}
    assert {p.arrival for p in params} == {"shuffled", "bursts", "drift"}
    assert {p.lifetime for p in params} == {"exponential", "lognormal"}


def test_a_subset_is_nodes_of_the_base_list_holding_at_least_the_minimum() -> None:
    subsets = [p for p in map(draw_params, range(40)) if p.cluster.kind == "subset"]
    assert subsets
    for params in subsets:
        nodes = build_nodes(params, BASE)
        assert set(nodes) <= set(BASE)
        assert sum(n.gpus for n in nodes) >= min(params.cluster.gpus, MIN_GPUS)


def test_a_synthetic_cluster_has_the_nodes_of_its_shapes() -> None:
    nodes = build_nodes(small(), BASE)
    assert Counter((n.model, n.gpus) for n in nodes) == {("A", 8): 4, ("B", 1): 32}
    assert len({n.name for n in nodes}) == len(nodes)


def test_arrivals_ask_for_the_load_times_the_capacity() -> None:
    params = small()
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=1.3)
    requested = sum(o.gpus for o in arrivals)
    assert 1.3 * 64 <= requested < 1.3 * 64 + 8


def test_no_order_is_bigger_than_the_nodes_that_could_hold_it() -> None:
    # 2 vCPUs and 2 × the memory of a GPU's share: more than the 1-GPU nodes have.
    greedy = (Flavor(cpu_ratio=1.5, memory_ratio=1.5, weight=1.0),)
    params = small(gpu_mix=(0.25, 0.25, 0.25, 0.25), flavors=greedy)
    for o in draw_arrivals(params, build_nodes(params, BASE), 42, load=5):
        assert o.gpus <= 8
        # At most its GPUs' share of the roomiest node holding as many (16 cores per GPU).
        assert o.cpu_milli <= o.gpus * 16_000 and o.memory_mib <= o.gpus * 64 * GIB


def test_no_gpu_count_asks_for_more_gpus_than_the_nodes_holding_it_have() -> None:
    # Every order wants 8 GPUs, but the 8-GPU nodes are half the GPUs: 1-GPU orders fill.
    params = small(gpu_mix=(0.0, 0.0, 0.0, 1.0), arrival="shuffled")
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=20)
    eights = sum(o.gpus for o in arrivals if o.gpus == 8)
    assert eights <= 0.5 * sum(o.gpus for o in arrivals) * 1.01


def test_restricted_orders_name_models_of_the_cluster() -> None:
    params = small(restricted=1.0, width=1)
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=3)
    assert {o.models for o in arrivals} == {frozenset({"A"}), frozenset({"B"})}


def test_an_unrestricted_mix_names_no_model() -> None:
    params = small(restricted=0.0, arrival="shuffled")
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=3)
    assert all(not o.models for o in arrivals)


def test_a_drifting_mix_moves_from_its_start_to_its_end_as_the_cluster_fills() -> None:
    params = small(gpu_mix=(1.0, 0, 0, 0), drift_mix=(0, 0, 0, 1.0), arrival="drift")
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=3)
    assert arrivals[0].gpus == 1
    requested, late = 0, []
    for o in arrivals:
        if requested >= 64:
            late.append(o.gpus)
        requested += o.gpus
    # Past the capacity the end mix holds, as far as the 8-GPU nodes' share allows.
    assert Counter(late)[8] * 8 >= 0.4 * sum(late)


def test_bursts_are_groups_of_identical_orders_created_together() -> None:
    params = small(arrival="bursts", burst_mean=8.0)
    arrivals = draw_arrivals(params, build_nodes(params, BASE), 42, load=3)
    groups = Counter((o.created_s, o.gpus, o.cpu_milli, o.memory_mib) for o in arrivals)
    assert max(groups.values()) > 1
    assert len(groups) < len(arrivals) / 2


def test_every_order_lives_a_while_after_it_is_created() -> None:
    for lifetime in ("exponential", "lognormal"):
        params = small(lifetime=lifetime, lifetime_mean_s=3600.0)
        arrivals = draw_arrivals(params, build_nodes(params, BASE), 42)
        assert all(o.deleted_s > o.created_s for o in arrivals)
        assert [o.created_s for o in arrivals] == sorted(o.created_s for o in arrivals)


def test_a_written_draw_replays_as_a_trace(tmp_path: Path) -> None:
    params = small(restricted=0.5)
    nodes = build_nodes(params, BASE)
    arrivals = draw_arrivals(params, nodes, 42)
    generate.write(params, nodes, arrivals, tmp_path)
    assert load_nodes(tmp_path / "nodes.csv") == nodes
    assert orders_from_pods(load_pods(tmp_path / "pods.csv")) == arrivals
    assert json.loads((tmp_path / "params.json").read_text())["draw"] == 0


DRAW_IN_CHILD = """
from gpu_binder.replay.generate import build_nodes, draw_arrivals, draw_params
from gpu_binder.replay.trace import load_nodes
import sys
base = load_nodes(sys.argv[1])
for d in (3, 4, 5):
    p = draw_params(d)
    nodes = build_nodes(p, base)
    print(p, nodes[:3], draw_arrivals(p, nodes, 42)[:50])
"""


def test_a_draw_does_not_depend_on_the_interpreter_hash_seed() -> None:
    def run(hash_seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        src = str(Path(__file__).resolve().parents[2] / "src")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
        done = subprocess.run(
            [sys.executable, "-c", DRAW_IN_CHILD, str(SHIPPED / "openb_node_list_gpu_node.csv")],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("1") == run("2")
