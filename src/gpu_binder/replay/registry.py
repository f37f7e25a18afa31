"""The policies the replay knows, by the names the command line uses."""

from __future__ import annotations

from gpu_binder.replay import baselines
from gpu_binder.replay.experimental_binder import experimental_binder_policy
from gpu_binder.replay.policy import PolicyFactory

BASELINES: dict[str, PolicyFactory] = {
    "random": baselines.random_policy,
    "firstfit": baselines.firstfit_policy,
    "spread": baselines.spread_policy,
    "bestfit": baselines.bestfit_policy,
    "fgd": baselines.fgd_policy,
}


def binder_factory() -> PolicyFactory | None:
    """The binder's own policy, or None while `gpu_binder.placement` cannot drive it."""
    try:
        from gpu_binder.replay.binder_adapter import binder_policy
    except (ImportError, AttributeError, KeyError):
        return None
    return binder_policy


def policies() -> dict[str, PolicyFactory]:
    """Every policy available, the binder's first when it can run."""
    found: dict[str, PolicyFactory] = {}
    binder = binder_factory()
    if binder is not None:
        found["binder"] = binder
    found.update(BASELINES)
    found["experimental_binder"] = experimental_binder_policy
    return found
