"""The sweep: the binder against the best baseline on many generated draws, reported as a
distribution whose worst case is the figure."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_binder.replay import command, generate
from gpu_binder.replay import sweep as sweep_module
from gpu_binder.replay.binder_adapter import binder_run
from gpu_binder.replay.command import main_replay
from gpu_binder.replay.generate import ClusterShape, NodeShape, Params
from gpu_binder.replay.registry import BINDER
from gpu_binder.replay.sweep import DrawResult, distribution, merged, run_draw, summary

from .test_generate import BASE, small

TINY = (NodeShape("A", 4, 32_000, 128 * 1024, 4),)
DRAW_PARAMS = generate.draw_params


def result(draw: int, binder: float, **baselines: float) -> DrawResult:
    return DrawResult(
        draw=draw,
        cluster="synthetic",
        capacity_gpus=100,
        bound=0.0,
        unallocated={BINDER: binder, **baselines},
        rejected={},
        seconds=0.0,
    )


def test_the_gap_is_the_binder_minus_the_best_baseline() -> None:
    r = result(1, 2.0, firstfit=1.5, fgd=3.0)
    assert r.best_baseline == ("firstfit", 1.5)
    assert r.gap == 0.5


def test_the_online_gap_leaves_out_the_baselines_handed_the_workload() -> None:
    r = result(1, 2.0, firstfit=1.5, fgd=1.0)
    assert r.gap == 1.0
    assert r.gap_online == 0.5
    assert result(2, 2.0, fgd=1.0).gap_online is None


def test_the_summary_gives_the_online_gap_s_distribution() -> None:
    rows = [result(1, 2.0, firstfit=1.5, fgd=1.0), result(2, 1.0, fgd=2.0)]
    online = summary(rows)["binder_minus_best_online"]
    assert isinstance(online, dict)
    assert (online["draws"], online["worst"]) == (1, 0.5)


def test_the_distribution_leads_with_the_worst_draw() -> None:
    d = distribution([-1.0, 0.0, 0.5, 0.1, 0.2, 0.0, 0.0, 0.0, 0.0, 0.3])
    assert (d["worst"], d["p90"], d["best"], d["behind"]) == (0.5, 0.3, -1.0, 4)
    assert d["mean"] == 0.01


def seeded(binder: list[float], firstfit: list[float]) -> DrawResult:
    r = result(1, sum(binder) / len(binder), firstfit=sum(firstfit) / len(firstfit))
    return replace(r, unallocated_per_seed={BINDER: binder, "firstfit": firstfit})


def test_the_gap_s_error_is_that_of_the_paired_per_seed_differences() -> None:
    # Differences 1, 0, 2, 1: their mean 1, their standard deviation √(2/3), over √4.
    r = seeded([5.0, 4.0, 7.0, 3.0], [4.0, 4.0, 5.0, 2.0])
    assert r.gap_se == pytest.approx((2 / 3) ** 0.5 / 2)


def test_a_gap_within_two_standard_errors_is_noise() -> None:
    # Mean difference 0.5 from differences 3, -2, 3, -2: an error of 1.44.
    assert not seeded([8.0, 3.0, 8.0, 3.0], [5.0, 5.0, 5.0, 5.0]).behind_beyond_noise


def test_a_gap_every_seed_agrees_on_is_past_noise() -> None:
    assert seeded([5.5, 5.4, 5.6, 5.5], [5.0, 5.0, 5.0, 5.0]).behind_beyond_noise


def test_a_gap_without_seeds_to_tell_noise_by_counts_as_behind() -> None:
    assert result(1, 2.0, firstfit=1.0).behind_beyond_noise


def test_the_summary_names_the_draws_behind_beyond_noise() -> None:
    noisy = replace(seeded([8.0, 3.0, 8.0, 3.0], [5.0, 5.0, 5.0, 5.0]), draw=7)
    clear = replace(seeded([5.5, 5.4, 5.6, 5.5], [5.0, 5.0, 5.0, 5.0]), draw=8)
    assert summary([noisy, clear])["binder_behind_beyond_noise"] == [8]


def test_the_summary_splits_the_gap_by_how_the_orders_arrive() -> None:
    steady = replace(result(1, 1.0, firstfit=2.0), arrival="shuffled")
    bursts = [replace(result(d, 3.0, firstfit=2.0 + d / 10), arrival="bursts") for d in (2, 3)]
    by = summary([steady, *bursts])["binder_minus_best_by_arrival"]
    assert isinstance(by, dict)
    assert (by["shuffled"]["draws"], by["shuffled"]["worst"]) == (1, -1.0)
    assert (by["bursts"]["draws"], by["bursts"]["worst"]) == (2, 0.8)


def test_the_bound_is_checked_only_where_the_best_baseline_is_near_it() -> None:
    near = result(1, 0.5, firstfit=0.2)
    far = result(2, 9.0, firstfit=5.0)
    dist = summary([near, far])["binder_minus_bound_where_baseline_within_0.3"]
    assert isinstance(dist, dict)
    assert (dist["draws"], dist["worst"]) == (1, 0.5)


def test_a_draw_runs_every_contender_on_its_cluster_and_seeds() -> None:
    from gpu_binder.replay.registry import policies

    contenders = {name: f for name, f in policies().items() if name in (BINDER, "firstfit")}
    r = run_draw(small(*TINY), BASE, contenders, seeds=2)
    assert (r.capacity_gpus, r.cluster) == (16, "synthetic")
    assert set(r.unallocated) == {BINDER, "firstfit"}
    assert r.bound <= min(r.unallocated.values())


def test_a_sweep_needs_the_binder_and_a_baseline() -> None:
    with pytest.raises(ValueError):
        run_draw(small(*TINY), BASE, {BINDER: binder_run()}, seeds=1)


def tiny(draw: int) -> Params:
    params = DRAW_PARAMS(draw)
    return replace(params, cluster=ClusterShape("synthetic", nodes=TINY))


def test_the_command_sweeps_draws_and_prints_the_distributions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generate, "draw_params", tiny)
    argv = ["--sweep", "3", "--draw-base", "5", "--policies", "binder,firstfit", "--json"]
    assert main_replay([*argv, "--seeds", "1", "--online"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["draw"] for row in out["draws"]] == [5, 6, 7]
    assert out["summary"]["binder_minus_best"]["draws"] == 3


def test_a_draw_keeps_each_seed_s_figure_for_paired_comparison() -> None:
    from gpu_binder.replay.registry import policies

    contenders = {name: f for name, f in policies().items() if name in (BINDER, "firstfit")}
    r = run_draw(small(*TINY), BASE, contenders, seeds=3)
    assert {name: len(v) for name, v in r.unallocated_per_seed.items()} == {
        BINDER: 3,
        "firstfit": 3,
    }
    assert r.unallocated[BINDER] == pytest.approx(sum(r.unallocated_per_seed[BINDER]) / 3, abs=1e-3)


def test_the_command_replays_one_generated_draw_like_a_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generate, "draw_params", tiny)
    assert main_replay(["--generate", "9", "--seeds", "2", "--policies", "firstfit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["trace"], out["seeds"], out["capacity_gpus"]) == ("draw9", 2, 16)


def test_the_command_writes_a_draw_as_trace_files(tmp_path: Path) -> None:
    assert main_replay(["--generate", "4", "--write", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"nodes.csv", "pods.csv", "params.json"}


def test_a_sweep_without_a_baseline_is_a_usage_error() -> None:
    assert main_replay(["--sweep", "2", "--policies", "binder"]) == 2


def test_a_trace_replay_still_needs_both_files() -> None:
    assert main_replay([str(command.SHIPPED_NODES)]) == 2


def test_the_sweep_for_people_names_the_draws_behind_beyond_noise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(generate, "draw_params", tiny)
    argv = ["--sweep", "2", "--policies", "binder,firstfit", "--seeds", "2", "--online"]
    assert main_replay(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("binder_behind_beyond_noise: [") for line in lines)
    kinds = lines.index("binder_minus_best_by_arrival:") + 1
    assert lines[kinds].startswith("  ") and "worst" in lines[kinds]
    header = next(line for line in lines if line.split()[:1] == ["draw"])
    assert header.split()[-1] == "se"


def test_a_draw_confirmed_on_more_seeds_is_its_mean_over_all_of_them() -> None:
    first = seeded([6.0, 6.0], [4.0, 4.0])
    more = seeded([4.0, 4.0, 4.0, 4.0], [4.0, 4.0, 4.0, 4.0])
    both = merged(first, more)
    assert (both.seeds, both.first_gap) == (6, 2.0)
    assert both.gap == pytest.approx(2 / 3)
    assert both.row()["binder_minus_best_on_the_sweep_s_seeds"] == 2.0


def test_only_the_same_draw_merges() -> None:
    with pytest.raises(ValueError):
        merged(seeded([1.0], [1.0]), replace(seeded([1.0], [1.0]), draw=2))


def test_the_sweep_confirms_only_the_draws_furthest_behind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gaps = {5: 1.0, 6: 3.0, 7: -1.0, 8: 2.0}
    runs: list[tuple[int, int, int]] = []

    def fake_run(
        params: Params, base: object, contenders: object, seeds: int, first_seed: int = 42
    ) -> DrawResult:
        runs.append((params.draw, seeds, first_seed))
        gap = gaps[params.draw] if first_seed == 42 else 0.0
        return replace(seeded([gap] * seeds, [0.0] * seeds), draw=params.draw)

    monkeypatch.setattr(sweep_module, "run_draw", fake_run)
    argv = ["--sweep", "4", "--draw-base", "5", "--seeds", "2", "--policies", "binder,firstfit"]
    assert main_replay([*argv, "--confirm", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert runs[4:] == [(6, 6, 44), (8, 6, 44)]
    assert out["summary"]["confirmed_on_more_seeds"] == [6, 8]
    assert {row["draw"]: row["seeds"] for row in out["draws"]} == {5: 2, 6: 8, 7: 2, 8: 8}
    assert out["summary"]["binder_minus_best"]["worst"] == 1.0


def test_confirming_on_no_seeds_is_a_usage_error() -> None:
    argv = ["--sweep", "2", "--policies", "binder,firstfit", "--confirm", "1"]
    assert main_replay([*argv, "--confirm-seeds", "0"]) == 2
