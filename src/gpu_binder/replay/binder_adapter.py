"""The binder's own class policy (`gpu_binder.placement`) driving the replay.

TODO(wiring): this drives only the class policy's score through `placement.rank`; the
issue asks for the orders step itself on the embedded cluster. Until placement covers
them, the adapter does three things that belong to the binder:
- CPU and memory fit: only nodes that fit them are offered as candidates;
- orders accepting several models: each model is ranked and the best fit wins;
- ties: `rank` breaks them by node name, not by the replay's shuffled node order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gpu_binder.placement import POLICIES, Candidate, Fit, rank
from gpu_binder.placement.choose import EMPTY_OUTLOOK
from gpu_binder.replay.cluster import ReplayCluster
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import Policy

CLASS_POLICY = "Pack"


def binder_policy(workload: Sequence[Order]) -> Policy:
    """The binder's default class policy over the nodes that fit the order's CPU and memory."""
    score = POLICIES[CLASS_POLICY]

    def choose(order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        by_model: dict[str, list[Candidate]] = {}
        for group in cluster.feasible_groups(order):
            # One node stands for its group: all of them score alike.
            node = cluster.names[group.members[0]]
            by_model.setdefault(group.model, []).append(
                Candidate(node, {group.model: group.free_gpus})
            )
        best: Fit | None = None
        for model, candidates in by_model.items():
            fits = rank({model: order.gpus}, candidates, score)
            if fits and (
                best is None
                or (-score(fits[0], EMPTY_OUTLOOK), fits[0].node)
                < (-score(best, EMPTY_OUTLOOK), best.node)
            ):
                best = fits[0]
        return None if best is None else best.node

    return choose
