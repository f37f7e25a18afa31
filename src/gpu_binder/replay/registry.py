"""The contenders the replay knows, by the names the command line uses."""

from __future__ import annotations

from gpu_binder.replay import baselines
from gpu_binder.replay.binder_adapter import binder_run
from gpu_binder.replay.policy import PolicyFactory, RunFactory, policy_run

BINDER = "binder"

BASELINES: dict[str, PolicyFactory] = {
    "random": baselines.random_policy,
    "firstfit": baselines.firstfit_policy,
    "spread": baselines.spread_policy,
    "bestfit": baselines.bestfit_policy,
    "fgd": baselines.fgd_policy,
    "fgd-online": baselines.fgd_online_policy,
}

# Baselines handed the run's whole workload before its first order (FGD as published:
# given the target workload). Online the binder knows only the orders it has seen, so
# the sweep also reports its gap to the best of the rest (docs/PLACEMENT.md, *What the
# best baseline knows*).
FORESIGHTED = frozenset({"fgd"})


def policies(defrag: bool = True, backlog: bool = True) -> dict[str, RunFactory]:
    """Every contender: the binder's own placement first, then the baselines."""
    found: dict[str, RunFactory] = {BINDER: binder_run(defrag, backlog)}
    found.update({name: policy_run(factory) for name, factory in BASELINES.items()})
    return found
