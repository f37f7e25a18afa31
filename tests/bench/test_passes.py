"""The pass benchmark measures a settled world: its figures are of passes that write nothing."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from gpu_binder.bench.passes import run, touch_every_object
from gpu_binder.cache import World


async def test_an_unchanged_world_gets_no_writes_from_a_pass() -> None:
    figures = await run(devices=64, repeat=2)
    assert figures["writes_on_unchanged_pass"] == 0


async def test_a_new_leaders_first_pass_over_a_settled_world_writes_nothing() -> None:
    figures = await run(devices=64, repeat=2)
    assert figures["restart"]["first_pass_writes"] == 0
    assert figures["bound_devices"] > 0


async def test_each_pass_figure_has_its_cpu_time_beside_the_wall_clock() -> None:
    figures = await run(devices=64, repeat=2)
    for name in ("full_pass", "exhaustive_pass", "incremental_pass", "requests_pass"):
        assert figures[name]["cpu_median_ms"] >= 0
    assert figures["cold_pass"]["cpu_ms"] > 0


async def test_the_profile_names_the_exhaustive_pass_hot_functions_with_their_call_counts() -> None:
    figures = await run(devices=64, repeat=2, profile=5)
    rows = figures["exhaustive_profile"]
    assert 0 < len(rows) <= 5
    assert all(row["calls"] > 0 and ":" in row["function"] for row in rows)


async def test_without_a_profile_asked_for_the_figures_hold_none() -> None:
    figures = await run(devices=64, repeat=2)
    assert "exhaustive_profile" not in figures


async def test_the_exhaustive_pass_is_also_given_in_walks_of_its_own_heap() -> None:
    figures = await run(devices=64, repeat=2)
    assert figures["cache_walk"]["cpu_median_ms"] > 0
    assert figures["exhaustive_per_walk"] > 0


def test_the_walk_reads_one_field_of_every_cached_vm_vmi_and_device() -> None:
    def named(name: str) -> SimpleNamespace:
        return SimpleNamespace(metadata=SimpleNamespace(name=name))

    world = SimpleNamespace(
        vms={"ns/a": named("ab"), "ns/b": named("b")},
        vmis={"ns/a": named("abc")},
        devices=SimpleNamespace(
            by_name={"d": SimpleNamespace(spec=SimpleNamespace(node_name="n1"))}
        ),
    )
    assert touch_every_object(cast(World, world)) == 2 + 1 + 3 + 2
