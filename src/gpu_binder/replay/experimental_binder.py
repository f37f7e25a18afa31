"""EXPERIMENTAL: a prototype of the policy the binder should adopt, measured in the replay.

This is not the binder's placement (the replay's `binder` policy drives
`gpu_binder.placement`); it exists to show, with figures, what beats the baselines:

1. Class first: of the models an order accepts, take the one whose free GPUs are least
   claimed by orders that accept fewer models, so scarce models stay for the orders
   that can use nothing else.
2. Node second: on that model, the node where the fragmentation gradient (see
   `FragmentationGradient`) grows least, which weighs CPU and memory with the GPUs.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from gpu_binder.replay.baselines import FragmentationGradient
from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import Policy


def constrained_claims(workload: Sequence[Order], capacity: Mapping[str, int]) -> dict[str, float]:
    """Per model, the share of all ordered GPUs that orders restricted to some models claim.

    An order accepting several models claims each in proportion to its capacity;
    orders accepting any model claim nothing, since they can go anywhere.
    """
    claims = dict.fromkeys(capacity, 0.0)
    total = sum(order.gpus for order in workload) or 1
    for order in workload:
        accepted = [model for model in order.models if capacity.get(model, 0) > 0]
        room = sum(capacity[model] for model in accepted)
        for model in accepted:
            claims[model] += order.gpus * capacity[model] / room / total
    return claims


def model_pressure(claims: Mapping[str, float], cluster: ReplayCluster) -> dict[str, float]:
    """Share of each model's free GPUs that restricted orders will claim as the cluster fills.

    If the remaining free GPUs all went to orders of the workload's mix, restricted
    orders would claim `claims[m] * free GPUs` of model m; above 1, m is oversubscribed.
    """
    free_total = cluster.capacity_gpus - cluster.allocated_gpus
    return {
        model: claims.get(model, 0.0) * free_total / free
        for model, free in cluster.model_free.items()
        if free > 0
    }


class ScarcityThenFragmentation:
    """The least claimed model, then the node whose fragmentation grows least, then node order."""

    def __init__(self, workload: Sequence[Order]) -> None:
        self._workload = workload
        self._fragmentation = FragmentationGradient(workload)
        self._claims: dict[str, float] | None = None
        self._kinds: dict[tuple[int, int, int, frozenset[str]], int] = {}

    def __call__(self, order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        if not groups:
            return None
        if self._claims is None:
            self._claims = constrained_claims(self._workload, cluster.model_capacity)
        pressure = model_pressure(self._claims, cluster)
        kind = self._kinds.setdefault(order.demand, len(self._kinds))
        growth_of = self._fragmentation.growth

        def key(group: NodeGroup) -> tuple[float, float, int]:
            growth = group.memo.get(kind)
            if growth is None:
                growth = growth_of(group, order)
                group.memo[kind] = growth
            return (pressure[group.model], growth, group.members[0])

        return cluster.names[min(groups, key=key).members[0]]


def experimental_binder_policy(workload: Sequence[Order]) -> Policy:
    return ScarcityThenFragmentation(workload)
