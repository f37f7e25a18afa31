"""The replay's `binder` is the binder: its World, its orders step's completion, its
defragmentation — on the trace's nodes, classes and orders."""

from __future__ import annotations

from gpu_binder.api.types import BindReason
from gpu_binder.replay.arrival import run_arrival
from gpu_binder.replay.binder_adapter import BinderRun, binder_run, class_name
from gpu_binder.replay.timeline import resample, run_timeline

from .make import node, order

HOUR = 3600


def test_the_cluster_is_built_as_the_binder_sees_one() -> None:
    run = BinderRun([node("n0", gpus=2, model="V100M16", cpu=16_000, mem=1024)], seed=42)
    world = run.world
    assert set(world.classes) == {"v100m16"}
    [n] = world.nodes.values()
    assert (n.cpu_milli, n.memory_bytes) == (16_000, 1024 * 2**20)
    assert world.devices.free_count["v100m16"] == 2
    assert class_name("A10|x") == "a10-x"


def test_an_order_is_a_vm_bound_by_the_orders_step_completion() -> None:
    run = BinderRun([node("n0", gpus=4, model="A"), node("n1", gpus=4, model="B")], seed=42)
    assert run.arrive(1, order(gpus=2, cpu=2_000, models=frozenset({"B"})))
    devices = run.world.devices.set_of(run.key(1))
    assert len(devices) == 2 and {d.status.class_name for d in devices} == {"b"}
    binding = devices[0].status.binding
    assert binding is not None and binding.reason == BindReason.ORDER
    assert run.world.devices.resources.used[devices[0].spec.node_name] == (2_000, 1_000 * 2**20)
    assert run.allocated_gpus == 2


def test_cpu_and_memory_limit_what_fits() -> None:
    run = BinderRun([node("n0", gpus=4, cpu=8_000)], seed=42)
    assert run.arrive(1, order(cpu=6_000))
    assert not run.arrive(2, order(cpu=6_000))
    assert run.allocated_gpus == 1


def test_an_order_for_a_model_the_cluster_lacks_is_rejected() -> None:
    run = BinderRun([node("n0", model="A")], seed=42)
    assert not run.arrive(1, order(models=frozenset({"Z"})))


def test_a_departure_frees_the_set() -> None:
    run = BinderRun([node("n0", gpus=2)], seed=42)
    vm = order(gpus=2)
    assert run.arrive(1, vm)
    assert not run.arrive(2, vm)
    run.leave(1, vm)
    assert run.arrive(3, vm)


def test_arrival_mode_runs_the_binder_side_by_side_with_the_baselines() -> None:
    nodes = [node(f"n{i}", gpus=2, model="AB"[i % 2]) for i in range(4)]
    arrivals = [order(gpus=1, name=f"vm{i}") for i in range(8)]
    result = run_arrival(nodes, arrivals, binder_run(), seed=42)
    assert (result.unallocated_gpus, result.rejected_orders) == (0, 0)


def test_stopped_sets_move_to_make_room_for_an_order_that_fits_nowhere() -> None:
    for defrag in (True, False):
        run = BinderRun([node("n0"), node("n1")], seed=42, defrag=defrag)
        quarter = order(gpus=4)
        for i in range(1, 5):
            assert run.arrive(i, quarter)  # two per node: both nodes full
        run.leave(1, quarter)
        run.leave(3, quarter)
        run.stop(2, quarter)
        run.stop(4, quarter)
        # Each node holds one stopped set of 4 and 4 free GPUs: no room for 8 as it is.
        assert run.arrive(5, order(gpus=8)) is defrag
        assert run.moves == (1 if defrag else 0)


def test_a_stopped_vm_keeps_its_gpus_until_it_is_deleted() -> None:
    orders = [
        order(gpus=2, created=0, deleted=HOUR),
        order(gpus=2, created=2 * HOUR, deleted=3 * HOUR),
    ]
    for stopped, rejected in ((0, 0), (2 * HOUR, 1)):
        result = run_timeline([node("n0", gpus=2)], orders, binder_run(), 42, stopped)
        assert result.rejected_orders == rejected


def test_load_redraws_the_orders_as_a_stream_asking_that_load() -> None:
    orders = [order(gpus=1, created=0, deleted=100), order(gpus=2, created=5, deleted=55)]
    drawn = resample(orders, capacity_gpus=10, load=1.0, seed=42, count=4000)
    assert resample(orders, 10, 1.0, 42, 4000) == drawn
    assert {(o.gpus, o.deleted_s - o.created_s) for o in drawn} == {(1, 100), (2, 50)}
    # While arrivals last, the GPUs asked for average the load: here all of capacity.
    end = drawn[-1].created_s
    inside = sum(o.gpus * (min(o.deleted_s, end) - o.created_s) for o in drawn)
    assert 0.95 < inside / end / 10 < 1.05
    faster = resample(orders, 10, 2.0, 42, 4000)
    assert faster[-1].created_s < end


def test_a_models_last_whole_nodes_are_kept_for_the_orders_only_they_hold() -> None:
    # Multigpu40's seed 46 in small: 4-GPU, 60-core orders pair exactly on A's 128-core
    # nodes and strand half of B's 96-core ones; 8-GPU, 88-core orders fit either model,
    # so A and B are claimed alike — but the 120-core orders fit A alone, and 2 of them
    # against A's 5 whole nodes vary more than 6 against B's 9. Pricing only stranding,
    # the pairs broke four A nodes and the second 120-core order found none.
    either, a_only = frozenset({"A", "B"}), frozenset({"A"})
    nodes = [node(f"a{i}", model="A", cpu=128_000, mem=2**20) for i in range(5)]
    nodes += [node(f"b{i}", model="B", cpu=96_000, mem=2**20) for i in range(9)]
    nodes += [node("c0", gpus=2, model="C", cpu=16_000, mem=2**20)]
    orders = [order(gpus=4, cpu=60_000, models=either) for _ in range(7)]
    orders += [order(gpus=8, cpu=120_000, models=a_only) for _ in range(2)]
    orders += [order(gpus=8, cpu=88_000, models=either) for _ in range(6)]
    run = BinderRun(nodes, seed=42)
    run.submit(orders)
    placed = [run.arrive(i, o) for i, o in enumerate(orders, start=1)]
    assert all(placed)
    assert run.allocated_gpus == 7 * 4 + 2 * 8 + 6 * 8
