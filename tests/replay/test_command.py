"""`gpu-binder replay`: the policies side by side, as the JSON object the issue specifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_binder.replay.command import main_replay

from .make import NODE_HEADER, POD_HEADER, write


@pytest.fixture
def trace(tmp_path: Path) -> tuple[str, str]:
    nodes = write(
        tmp_path / "nodes.csv",
        NODE_HEADER,
        "n0,64000,262144,8,G2",
        "n1,16000,122880,2,P100",
        "n2,104000,524288,2,T4",
    )
    pods = write(
        tmp_path / "pods.csv",
        POD_HEADER,
        "p0,12000,16384,1,1000,,LS,Running,0,100,0",
        "p1,6000,12288,1,460,T4,LS,Running,10,50,10",
        "p2,8000,30000,2,1000,P100|T4,LS,Running,20,80,20",
        "p3,4000,8000,0,0,,LS,Running,20,80,20",
    )
    return str(nodes), str(pods)


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main_replay([*argv, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert isinstance(result, dict)
    return result


def test_arrival_prints_every_policy_with_the_bound(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_json([*trace, "--seeds", "2", "--policies", "firstfit,fgd"], capsys)
    assert result["trace"] == "pods"
    assert (result["mode"], result["seeds"], result["capacity_gpus"]) == ("arrival", 2, 12)
    assert isinstance(result["bound_unallocated_gpu_pct"], float)
    policies = result["policies"]
    assert isinstance(policies, dict)
    assert list(policies) == ["firstfit", "fgd"]
    for figures in policies.values():
        assert {"unallocated_gpu_pct", "rejected_orders", "seconds"} <= set(figures)


def test_timeline_reports_gpu_hours_served_and_requested(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_json(
        [*trace, "--mode", "timeline", "--seeds", "1", "--policies", "spread"], capsys
    )
    assert result["bound_unallocated_gpu_pct"] is None
    figures = result["policies"]["spread"]  # type: ignore[index]
    assert figures["rejected_orders"] == 0
    assert figures["gpu_hours_served"] == figures["gpu_hours_requested"]


def test_curves_add_unallocated_gpus_per_arrived_load(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_json([*trace, "--seeds", "1", "--policies", "random", "--curves"], capsys)
    curve = result["policies"]["random"]["curve"]  # type: ignore[index]
    assert curve[0][0] == 1.0
    assert curve[-1][0] >= 130.0


def test_without_json_the_figures_print_as_a_table(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_replay([*trace, "--seeds", "1", "--policies", "bestfit"]) == 0
    assert "bestfit" in capsys.readouterr().out


def test_an_unknown_policy_is_a_usage_error(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_replay([*trace, "--policies", "firstfit,clairvoyant"]) == 2
    assert "unknown policy clairvoyant" in capsys.readouterr().err


def test_a_malformed_trace_is_reported_with_file_and_line(
    tmp_path: Path, trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(tmp_path / "bad.csv", NODE_HEADER, "n0,64000,many,8,G2")
    assert main_replay([str(bad), trace[1]]) == 2
    assert f"{bad}:2: memory_mib 'many' is not an integer" in capsys.readouterr().err


def test_a_missing_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_replay([]) == 2
    assert "usage" in capsys.readouterr().err


def test_the_plot_draws_unallocated_gpus_per_arrived_load(
    tmp_path: Path, trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    png = tmp_path / "curves.png"
    run_json([*trace, "--seeds", "1", "--policies", "binder,firstfit", "--plot", str(png)], capsys)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_timeline_takes_a_load_and_a_stopped_hold(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*trace, "--mode", "timeline", "--seeds", "1", "--policies", "binder,firstfit"]
    result = run_json([*argv, "--load", "1.5", "--stopped", "60", "--arrivals", "50"], capsys)
    assert (result["load"], result["draws"], result["stopped_seconds"]) == (1.5, 50, 60)
    figures = result["policies"]["binder"]  # type: ignore[index]
    assert {"rejected_orders", "gpu_hours_served", "moves"} <= set(figures)


def test_a_load_that_is_not_positive_is_a_usage_error(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main_replay([*trace, "--mode", "timeline", "--load", "0"]) == 2
    assert "--load must be positive" in capsys.readouterr().err


def test_seed_base_runs_the_seeds_from_there(
    trace: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    def unallocated(*argv: str) -> float:
        result = run_json([*trace, "--policies", "random", *argv], capsys)
        figure = result["policies"]["random"]["unallocated_gpu_pct"]  # type: ignore[index]
        assert isinstance(figure, float)
        return figure

    both = unallocated("--seeds", "2")
    first, second = unallocated("--seeds", "1"), unallocated("--seeds", "1", "--seed-base", "43")
    assert both == pytest.approx((first + second) / 2, abs=0.001)
    shifted = run_json(
        [*trace, "--seeds", "1", "--seed-base", "43", "--policies", "random"], capsys
    )
    assert shifted["first_seed"] == 43
