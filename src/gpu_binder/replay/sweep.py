"""A sweep: every contender on many generated workloads, summed up as distributions.

A policy is as good as its worst workload, not its mean one. The sweep runs each draw of
`generate` (its cluster, a few seeds of its arrivals) through the arrival mode with every
contender, and reports per draw the binder's unallocated GPUs minus the best baseline's
(in points of capacity; negative: the binder allocated more) and minus the tighter of
the replay's bounds, and over the draws the distribution of each: worst, p90, mean.

Draw numbers are the sweep's seeds: a range looked at while designing (tuning) and
another never looked at (held out) give two honest distributions.

The draws furthest behind are picked by their gap on a few seeds, so their gaps lean
high (the largest of many noisy figures); `confirm` reruns them on further seeds and
reports them over all their seeds, so the worst case is a figure, not a lucky pick.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import fmean, stdev
from typing import cast

from gpu_binder.replay import generate
from gpu_binder.replay.policy import RunFactory
from gpu_binder.replay.registry import BINDER, FORESIGHTED
from gpu_binder.replay.report import FIRST_SEED, JSON, replay
from gpu_binder.replay.trace import Node

# Where the best baseline is this close to the tighter bound, the binder must be too.
BOUND_SLACK = 0.3
# A draw's gap is past its seeds' noise when it exceeds this many standard errors of the
# paired per-seed differences. With 8 seeds a policy no worse than the baseline still
# passes that by chance on about 4 draws in 100 (Student's t, 7 degrees of freedom), so
# the count is read against that, not against zero.
NOISE_SE = 2.0


@dataclass(frozen=True, slots=True)
class DrawResult:
    """Every contender on one draw: unallocated GPUs in % of capacity, mean over seeds."""

    draw: int
    cluster: str
    capacity_gpus: int
    bound: float
    """The tighter of the replay's bounds (the fit bound)."""
    unallocated: Mapping[str, float]
    rejected: Mapping[str, float]
    seconds: float
    unallocated_per_seed: Mapping[str, Sequence[float]] = field(default_factory=dict)
    """Per contender, each seed's unallocated GPUs in %, in seed order."""
    arrival: str = ""
    """How the draw's orders arrive (generate.Arrival): shuffled, bursts or drift."""
    first_gap: float | None = None
    """Where the draw was confirmed on further seeds: its gap on the sweep's seeds alone."""

    @property
    def seeds(self) -> int:
        return len(self.unallocated_per_seed.get(BINDER, ()))

    @property
    def best_baseline(self) -> tuple[str, float]:
        name = min(
            (n for n in self.unallocated if n != BINDER), key=lambda n: (self.unallocated[n], n)
        )
        return name, self.unallocated[name]

    @property
    def gap(self) -> float:
        """Binder minus the best baseline, in points."""
        return self.unallocated[BINDER] - self.best_baseline[1]

    @property
    def gap_online(self) -> float | None:
        """Binder minus the best baseline that learns the mix as the binder does, by the
        orders it has placed (None where every baseline run was handed the workload)."""
        online = [v for n, v in self.unallocated.items() if n != BINDER and n not in FORESIGHTED]
        return self.unallocated[BINDER] - min(online) if online else None

    @property
    def gap_se(self) -> float | None:
        """The standard error of the gap: of the mean of the per-seed differences between
        the binder and the best baseline (the same arrivals and node order on each seed),
        or None with fewer than two seeds.

        The best baseline is the one whose mean is lowest on these very seeds, so the gap
        leans against the binder; the error does not correct for that."""
        binder = self.unallocated_per_seed.get(BINDER, ())
        best = self.unallocated_per_seed.get(self.best_baseline[0], ())
        if len(binder) < 2 or len(binder) != len(best):
            return None
        return stdev(b - o for b, o in zip(binder, best, strict=True)) / math.sqrt(len(binder))

    @property
    def behind_beyond_noise(self) -> bool:
        """Is the binder behind the best baseline by more than NOISE_SE standard errors?"""
        se = self.gap_se
        return self.gap > 0 and (se is None or self.gap > NOISE_SE * se)

    @property
    def above_bound(self) -> float:
        return self.unallocated[BINDER] - self.bound

    @property
    def baseline_near_bound(self) -> bool:
        return self.best_baseline[1] - self.bound <= BOUND_SLACK

    def row(self) -> JSON:
        name, best = self.best_baseline
        return {
            "draw": self.draw,
            "cluster": self.cluster,
            "arrival": self.arrival,
            "capacity_gpus": self.capacity_gpus,
            "bound_fit_unallocated_gpu_pct": self.bound,
            "binder": self.unallocated[BINDER],
            "best_baseline": name,
            "best_baseline_unallocated_gpu_pct": best,
            "binder_minus_best": round(self.gap, 3),
            "binder_minus_best_online": None if (g := self.gap_online) is None else round(g, 3),
            "binder_minus_best_se": None if (se := self.gap_se) is None else round(se, 3),
            "behind_beyond_noise": self.behind_beyond_noise,
            "binder_minus_bound": round(self.above_bound, 3),
            "seeds": self.seeds,
            "binder_minus_best_on_the_sweep_s_seeds": (
                None if self.first_gap is None else round(self.first_gap, 3)
            ),
            "unallocated_gpu_pct": dict(self.unallocated),
            "rejected_orders": dict(self.rejected),
            "unallocated_gpu_pct_per_seed": {
                n: list(v) for n, v in self.unallocated_per_seed.items()
            },
            "seconds": round(self.seconds, 1),
        }


def run_draw(
    params: generate.Params,
    base: Sequence[Node],
    contenders: Mapping[str, RunFactory],
    seeds: int,
    first_seed: int = FIRST_SEED,
) -> DrawResult:
    """Every contender on a draw's cluster, on `seeds` seeds of its arrivals."""
    if BINDER not in contenders or len(contenders) < 2:
        raise ValueError("a sweep compares the binder with at least one baseline")
    draw = params.draw
    nodes = generate.build_nodes(params, base)
    started = time.perf_counter()
    result = replay(
        trace=f"draw{draw}",
        nodes=nodes,
        orders=(),
        policies=contenders,
        seeds=seeds,
        first_seed=first_seed,
        draw=lambda seed: generate.draw_arrivals(params, nodes, seed),
    )
    table = result["policies"]
    assert isinstance(table, dict)
    bound = result["bound_fit_unallocated_gpu_pct"]
    assert isinstance(bound, float)
    return DrawResult(
        draw=draw,
        cluster=params.cluster.kind,
        capacity_gpus=sum(n.gpus for n in nodes),
        bound=bound,
        unallocated={n: float(row["unallocated_gpu_pct"]) for n, row in table.items()},
        unallocated_per_seed={
            n: [float(v) for v in cast(list[float], row["unallocated_gpu_pct_per_seed"])]
            for n, row in table.items()
        },
        rejected={n: float(row["rejected_orders"]) for n, row in table.items()},
        seconds=time.perf_counter() - started,
        arrival=params.arrival,
    )


def merged(first: DrawResult, more: DrawResult) -> DrawResult:
    """One draw on its first seeds and on further ones, as one result over all of them."""
    if first.draw != more.draw or set(first.unallocated) != set(more.unallocated):
        raise ValueError("only the same draw with the same contenders merges")
    n, m = first.seeds, more.seeds
    if n == 0 or m == 0:
        raise ValueError("merging needs each seed's figure")

    def weighted(a: float, b: float) -> float:
        return (a * n + b * m) / (n + m)

    per_seed = {
        name: [*seeds, *more.unallocated_per_seed[name]]
        for name, seeds in first.unallocated_per_seed.items()
    }
    return replace(
        first,
        bound=weighted(first.bound, more.bound),
        unallocated={name: fmean(v) for name, v in per_seed.items()},
        rejected={name: weighted(v, more.rejected[name]) for name, v in first.rejected.items()},
        seconds=first.seconds + more.seconds,
        unallocated_per_seed=per_seed,
        first_gap=first.gap,
    )


def distribution(values: Sequence[float]) -> JSON:
    """Worst (largest), p90 (nine in ten draws at or below it), mean, best."""
    if not values:
        return {"draws": 0}
    ordered = sorted(values)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]
    return {
        "draws": len(ordered),
        "worst": round(ordered[-1], 3),
        "p90": round(p90, 3),
        "mean": round(fmean(ordered), 3),
        "best": round(ordered[0], 3),
        "behind": sum(1 for v in ordered if v > 0),
    }


def summary(results: Sequence[DrawResult]) -> JSON:
    """The distributions over the draws; the gap also per arrival kind, as the losses
    gather where orders do not arrive as a steady sample (bursts, drift:
    docs/PLACEMENT.md)."""
    near = [r for r in results if r.baseline_near_bound]
    kinds = sorted({r.arrival for r in results})
    return {
        "binder_minus_best": distribution([r.gap for r in results]),
        "binder_minus_best_by_arrival": {
            kind: distribution([r.gap for r in results if r.arrival == kind]) for kind in kinds
        },
        "binder_minus_best_online": distribution(
            [g for r in results if (g := r.gap_online) is not None]
        ),
        "binder_behind_beyond_noise": [r.draw for r in results if r.behind_beyond_noise],
        "confirmed_on_more_seeds": [r.draw for r in results if r.first_gap is not None],
        "binder_minus_bound_where_baseline_within_0.3": distribution([r.above_bound for r in near]),
    }


def sweep(
    draws: Sequence[int],
    base: Sequence[Node],
    contenders: Mapping[str, RunFactory],
    seeds: int = 2,
    progress: Callable[[DrawResult], None] | None = None,
    confirm: int = 0,
    confirm_seeds: int = 0,
) -> JSON:
    """Every draw in `draws`; per-draw rows and the distributions over them. The
    `confirm` draws furthest behind are run again on `confirm_seeds` further seeds."""
    results: dict[int, DrawResult] = {}
    for draw in draws:
        done = run_draw(generate.draw_params(draw), base, contenders, seeds)
        results[draw] = done
        if progress is not None:
            progress(done)
    behind = sorted((r for r in results.values() if r.gap > 0), key=lambda r: -r.gap)
    for first in behind[:confirm] if confirm_seeds > 0 else ():
        more = run_draw(
            generate.draw_params(first.draw),
            base,
            contenders,
            confirm_seeds,
            first_seed=FIRST_SEED + seeds,
        )
        results[first.draw] = merged(first, more)
        if progress is not None:
            progress(results[first.draw])
    return {
        "draws": [r.row() for r in results.values()],
        "seeds_per_draw": seeds,
        "summary": summary(list(results.values())),
    }
