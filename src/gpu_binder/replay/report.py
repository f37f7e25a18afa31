"""Running policies side by side on one trace and summing them up as one JSON object."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from statistics import fmean
from typing import Literal

from gpu_binder.replay.arrival import ArrivalResult, draw_arrivals, run_arrival, until_full
from gpu_binder.replay.bound import (
    demand_by_fitting_models,
    demand_by_models,
    unallocated_bound_pct,
)
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import RunFactory
from gpu_binder.replay.timeline import TimelineResult, resample, run_timeline
from gpu_binder.replay.trace import Node

Mode = Literal["arrival", "timeline"]
FIRST_SEED = 42
JSON = dict[str, object]


def replay(
    trace: str,
    nodes: Sequence[Node],
    orders: Sequence[Order],
    policies: Mapping[str, RunFactory],
    seeds: int = 10,
    mode: Mode = "arrival",
    curves: bool = False,
    load: float | None = None,
    stopped_s: int = 0,
    draws: int = 0,
    first_seed: int = FIRST_SEED,
    draw: Callable[[int], Sequence[Order]] | None = None,
) -> JSON:
    """Every policy on the same seeds (same arrivals, same node order); means over seeds.

    `seconds` is a policy's total time over all seeds. In arrival mode the bound is the
    model-capacity bound of each seed's arrivals at 100%, averaged like the results.
    Timeline mode takes `load` (with `draws` orders drawn per seed, default 3 × the
    trace's) and `stopped_s` (see timeline). Seeds run from `first_seed` on.

    `draw` (a generated workload, see generate) gives each seed's arrivals in their own
    order and times instead of draws from `orders`; they are then also the workload a
    policy may study, and timeline mode replays them at their own times.
    """
    if seeds < 1:
        raise ValueError("at least one seed is needed")
    capacity = sum(node.gpus for node in nodes)
    model_capacity: dict[str, int] = {}
    for node in nodes:
        model_capacity[node.model] = model_capacity.get(node.model, 0) + node.gpus
    seed_list = range(first_seed, first_seed + seeds)
    result: JSON = {"trace": trace, "mode": mode, "seeds": seeds, "capacity_gpus": capacity}
    if first_seed != FIRST_SEED:
        result["first_seed"] = first_seed
    if mode == "arrival":
        runs: dict[str, list[ArrivalResult]] = {name: [] for name in policies}
        bounds: list[float] = []
        fit_bounds: list[float] = []
        for seed in seed_list:
            arrivals = draw(seed) if draw else draw_arrivals(orders, capacity, seed)
            workload = arrivals if draw else orders
            full = until_full(arrivals, capacity)
            bounds.append(unallocated_bound_pct(demand_by_models(full), model_capacity))
            fit_bounds.append(
                unallocated_bound_pct(demand_by_fitting_models(full, nodes), model_capacity)
            )
            for name, factory in policies.items():
                runs[name].append(run_arrival(nodes, arrivals, factory, seed, workload))
        result["bound_unallocated_gpu_pct"] = _round(fmean(bounds))
        result["bound_fit_unallocated_gpu_pct"] = _round(fmean(fit_bounds))
        result["policies"] = {name: _arrival_summary(rs, curves) for name, rs in runs.items()}
    else:
        timelines: dict[str, list[TimelineResult]] = {name: [] for name in policies}
        for seed in seed_list:
            source = list(draw(seed)) if draw else list(orders)
            count = draws or 3 * len(source)
            timed = resample(source, capacity, load, seed, count) if load else source
            for name, factory in policies.items():
                timelines[name].append(run_timeline(nodes, timed, factory, seed, stopped_s))
        if load:
            result["load"] = load
            result["draws"] = count
        if stopped_s:
            result["stopped_seconds"] = stopped_s
        result["bound_unallocated_gpu_pct"] = None
        result["policies"] = {name: _timeline_summary(rs) for name, rs in timelines.items()}
    return result


def _arrival_summary(runs: Sequence[ArrivalResult], curves: bool) -> JSON:
    summary: JSON = {
        "unallocated_gpu_pct": _round(fmean(r.unallocated_gpu_pct for r in runs)),
        # Per seed, in seed order: what a paired comparison of two policies reads.
        "unallocated_gpu_pct_per_seed": [_round(r.unallocated_gpu_pct) for r in runs],
        "rejected_orders": _round(fmean(r.rejected_orders for r in runs)),
        "rejected_orders_total": _round(fmean(r.rejected_orders_total for r in runs)),
        "seconds": _round(sum(r.seconds for r in runs)),
    }
    if curves:
        points = min(len(r.curve) for r in runs)
        summary["curve"] = [
            [runs[0].curve[i][0], _round(fmean(r.curve[i][1] for r in runs))] for i in range(points)
        ]
    return summary


def _timeline_summary(runs: Sequence[TimelineResult]) -> JSON:
    return {
        "unallocated_gpu_pct": _round(fmean(r.unallocated_gpu_pct for r in runs)),
        "rejected_orders": _round(fmean(r.rejected_orders for r in runs)),
        "gpu_hours_requested": _round(fmean(r.gpu_hours_requested for r in runs)),
        "gpu_hours_served": _round(fmean(r.gpu_hours_served for r in runs)),
        "moves": _round(fmean(r.moves for r in runs)),
        "seconds": _round(sum(r.seconds for r in runs)),
    }


def _round(value: float) -> float:
    return round(value, 3)
