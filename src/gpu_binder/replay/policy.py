"""The policy interface of the replay: given an order and the cluster, name a node.

A policy is made fresh for every run by a factory that may study the workload (the
orders of the trace, which is the distribution arrivals are drawn from), so it may keep
caches for the run; it must not change the cluster, and it draws randomness only from
the `random.Random` it is handed, so a run is reproducible per seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import Order

Policy = Callable[[Order, ReplayCluster, random.Random], str | None]
"""Name the node `order` goes to, or None to reject it; never a node it does not fit."""

PolicyFactory = Callable[[Sequence[Order]], Policy]
"""Make a policy for one run from the workload the orders are drawn from."""

Score = Callable[[NodeGroup, Order, ReplayCluster], float]
"""Lower is better; ties go to the node earliest in the cluster's node order."""


def lowest_score(score: Score) -> Policy:
    """The policy placing each order on the feasible node with the lowest score."""

    def choose(order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        if not groups:
            return None
        best = min(groups, key=lambda group: (score(group, order, cluster), group.members[0]))
        return cluster.names[best.members[0]]

    return choose
