"""The two interfaces of the replay: a policy on the light cluster model, and a run.

A **run** is one contender placing one seed's orders: orders arrive, stop (keeping their
GPUs reserved) and leave, each arrival under its own id, since arrival mode draws the
same trace order many times. The binder is a run of its own (`binder_adapter`: its real
placement on a World); the baselines are **policies** on the light `ReplayCluster`,
wrapped in a `PolicyRun`.

A policy is made fresh for every run by a factory that may study the workload (the
orders of the trace, which is the distribution arrivals are drawn from), so it may keep
caches for the run; it must not change the cluster, and it draws randomness only from
the `random.Random` it is handed, so a run is reproducible per seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol

from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import Order
from gpu_binder.replay.trace import Node

Policy = Callable[[Order, ReplayCluster, random.Random], str | None]
"""Name the node `order` goes to, or None to reject it; never a node it does not fit."""

PolicyFactory = Callable[[Sequence[Order]], Policy]
"""Make a policy for one run from the workload the orders are drawn from."""

Score = Callable[[NodeGroup, Order, ReplayCluster], float]
"""Lower is better; ties go to the node earliest in the cluster's node order."""


class Run(Protocol):
    """One contender placing one seed's orders on a cluster."""

    @property
    def capacity_gpus(self) -> int: ...

    @property
    def allocated_gpus(self) -> int: ...

    def submit(self, arrivals: Sequence[Order]) -> None:
        """Every order of the run exists up front, as a backlog placed in arrival order
        (arrival mode): arrival i is arrivals[i - 1]."""
        ...

    def arrive(self, i: int, order: Order) -> bool:
        """Place arrival i; False rejects it (it is not retried)."""
        ...

    def stop(self, i: int, order: Order) -> None:
        """Arrival i's VM stops: it keeps its GPUs reserved, but nothing runs on them."""
        ...

    def leave(self, i: int, order: Order) -> None:
        """Arrival i's VM is deleted: its GPUs are free again."""
        ...


RunFactory = Callable[[Sequence[Node], Sequence[Order], int], Run]
"""Start a run on nodes (in the seed's order) for a workload, on a seed."""


def lowest_score(score: Score) -> Policy:
    """The policy placing each order on the feasible node with the lowest score."""

    def choose(order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        if not groups:
            return None
        best = min(groups, key=lambda group: (score(group, order, cluster), group.members[0]))
        return cluster.names[best.members[0]]

    return choose


def policy_rng(seed: int) -> random.Random:
    """The randomness a policy may draw on in the seed's run."""
    return random.Random(f"policy:{seed}")


class PolicyRun:
    """A policy placing orders on the light cluster model."""

    def __init__(self, nodes: Sequence[Node], policy: Policy, seed: int) -> None:
        self.cluster = ReplayCluster(nodes)
        self.policy = policy
        self.rng = policy_rng(seed)
        self.placed: dict[int, str] = {}

    @property
    def capacity_gpus(self) -> int:
        return self.cluster.capacity_gpus

    @property
    def allocated_gpus(self) -> int:
        return self.cluster.allocated_gpus

    def submit(self, arrivals: Sequence[Order]) -> None:
        return  # a policy learns the workload from its factory, not from the backlog

    def arrive(self, i: int, order: Order) -> bool:
        node = self.policy(order, self.cluster, self.rng)
        if node is None:
            return False
        self.cluster.place(order, node)
        self.placed[i] = node
        return True

    def stop(self, i: int, order: Order) -> None:
        return  # a stopped order keeps its place; a policy never moves anything

    def leave(self, i: int, order: Order) -> None:
        node = self.placed.pop(i, None)
        if node is not None:
            self.cluster.remove(order, node)


def policy_run(factory: PolicyFactory) -> RunFactory:
    """Runs of a baseline policy made fresh from the workload for each seed."""

    def start(nodes: Sequence[Node], workload: Sequence[Order], seed: int) -> Run:
        return PolicyRun(nodes, factory(workload), seed)

    return start
