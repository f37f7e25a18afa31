"""The classic placement policies the binder is measured against.

Each scores the feasible nodes (acceptable model, enough free GPUs, CPU and memory) and
takes the lowest score, the node earliest in the cluster's node order on a tie.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from gpu_binder.replay.cluster import NodeGroup, ReplayCluster
from gpu_binder.replay.order import DemandKey, Order
from gpu_binder.replay.policy import Policy, lowest_score


def random_policy(workload: Sequence[Order]) -> Policy:
    """Any feasible node, uniformly."""

    def choose(order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        pick = rng.randrange(sum(len(group.members) for group in groups) or 1)
        for group in groups:
            if pick < len(group.members):
                return cluster.names[group.members[pick]]
            pick -= len(group.members)
        return None

    return choose


def firstfit_policy(workload: Sequence[Order]) -> Policy:
    """The first feasible node in node order."""

    def choose(order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        if not groups:
            return None
        return cluster.names[min(group.members[0] for group in groups)]

    return choose


def spread_score(group: NodeGroup, order: Order, cluster: ReplayCluster) -> float:
    """Most free GPUs first."""
    return -group.free_gpus


def spread_policy(workload: Sequence[Order]) -> Policy:
    return lowest_score(spread_score)


def bestfit_score(group: NodeGroup, order: Order, cluster: ReplayCluster) -> float:
    """The ATC '23 simulator's best fit: least CPU and GPU left, each over the largest node's."""
    cpu_left = (group.free_cpu - order.cpu_milli) / cluster.largest_cpu_milli
    gpus_left = (group.free_gpus - order.gpus) / cluster.largest_gpus
    return 0.5 * cpu_left + 0.5 * gpus_left


def bestfit_policy(workload: Sequence[Order]) -> Policy:
    return lowest_score(bestfit_score)


class FragmentationGradient:
    """Fragmentation gradient descent (Weng et al., ATC '23) for whole GPUs.

    A node's fragmentation is the expected number of its free GPUs that an order drawn
    from the workload cannot use: all of them when the order does not fit the node
    (model, GPU count, CPU or memory), none when it does, since whole free GPUs have no
    unusable remainder. The order goes where the cluster's fragmentation grows least.
    """

    def __init__(self, workload: Sequence[Order]) -> None:
        self._usable: dict[str, list[tuple[int, int, int, float]]] = {}
        self._fragmentation: dict[tuple[str, int, int, int], float] = {}
        self._kinds: dict[DemandKey, int] = {}
        self._next_kind = 0
        self.learn(Counter(order.demand for order in workload))

    def learn(self, counts: Counter[DemandKey]) -> None:
        """Take `counts` (orders per demand) as the workload from now on."""
        total = sum(counts.values()) or 1
        self._demands = [(demand, count / total) for demand, count in counts.items()]
        self._usable.clear()
        self._fragmentation.clear()
        # Growths the groups memoised under the old workload's kinds must not be read
        # again: new kinds get new numbers.
        self._kinds.clear()

    def fragmentation(self, model: str, gpus: int, cpu_milli: int, memory_mib: int) -> float:
        """Expected free GPUs of a node in this free state that a random order cannot use."""
        key = (model, gpus, cpu_milli, memory_mib)
        cached = self._fragmentation.get(key)
        if cached is not None:
            return cached
        usable = self._usable.get(model)
        if usable is None:
            usable = [
                (need, cpu, mem, share)
                for (need, cpu, mem, models), share in self._demands
                if not models or model in models
            ]
            self._usable[model] = usable
        fits = sum(
            share
            for need, cpu, mem, share in usable
            if need <= gpus and cpu <= cpu_milli and mem <= memory_mib
        )
        value = gpus * max(0.0, 1.0 - fits)
        self._fragmentation[key] = value
        return value

    def growth(self, group: NodeGroup, order: Order) -> float:
        """How much placing `order` on a node of `group` grows the node's fragmentation."""
        before = self.fragmentation(group.model, group.free_gpus, group.free_cpu, group.free_mem)
        after = self.fragmentation(
            group.model,
            group.free_gpus - order.gpus,
            group.free_cpu - order.cpu_milli,
            group.free_mem - order.memory_mib,
        )
        return after - before

    def __call__(self, order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        groups = cluster.feasible_groups(order)
        if not groups:
            return None
        kind = self._kinds.get(order.demand)
        if kind is None:
            kind = self._kinds[order.demand] = self._next_kind
            self._next_kind += 1
        best: NodeGroup | None = None
        best_growth = 0.0
        for group in groups:
            growth = group.memo.get(kind)
            if growth is None:
                growth = self.growth(group, order)
                group.memo[kind] = growth
            if (
                best is None
                or growth < best_growth
                or (growth == best_growth and group.members[0] < best.members[0])
            ):
                best, best_growth = group, growth
        assert best is not None
        return cluster.names[best.members[0]]


def fgd_policy(workload: Sequence[Order]) -> Policy:
    return FragmentationGradient(workload)


class OnlineFragmentationGradient(FragmentationGradient):
    """FGD as a live cluster could run it: the workload is the orders placed so far.

    The replay hands every factory the run's own orders, which for a generated draw is
    the future; this variant ignores them and learns from each order as it arrives,
    re-reading the mix whenever the orders seen have grown by REFRESH since the last
    reading (every order for the first twenty, about 150 readings over 10,000), so the
    cost of FGD's foresight can be told apart from the cost of its rule.
    """

    REFRESH = 1.05

    def __init__(self, workload: Sequence[Order]) -> None:
        super().__init__(())
        self._seen: Counter[DemandKey] = Counter()
        self._placed = 0
        self._next_reading = 1

    def __call__(self, order: Order, cluster: ReplayCluster, rng: random.Random) -> str | None:
        self._seen[order.demand] += 1
        self._placed += 1
        if self._placed >= self._next_reading:
            self.learn(self._seen)
            self._next_reading = max(self._placed + 1, int(self._placed * self.REFRESH))
        return super().__call__(order, cluster, rng)


def fgd_online_policy(workload: Sequence[Order]) -> Policy:
    return OnlineFragmentationGradient(workload)
