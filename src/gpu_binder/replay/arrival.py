"""Arrival mode (the ATC '23 method): orders arrive and stay until the cluster is overfull.

Orders are drawn with replacement from the trace until they ask for `load` times the
cluster's GPUs, and placed one by one, never removed. The figure of merit is the share
of GPUs left unallocated at the moment the arrived orders ask for 100% of the GPUs: a
perfect placement would have allocated all of them by then.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import RunFactory
from gpu_binder.replay.trace import Node

DEFAULT_LOAD = 1.3


@dataclass(frozen=True, slots=True)
class ArrivalResult:
    """One policy's run on one seed's arrivals."""

    seed: int
    capacity_gpus: int
    arrived_orders: int
    """Orders arrived up to and including the one that brought requests to 100%."""
    unallocated_gpus: int
    """GPUs unallocated right after that order was placed or rejected."""
    rejected_orders: int
    """Orders rejected up to that moment."""
    rejected_orders_total: int
    """Orders rejected over the whole arrival, up to `load`."""
    curve: tuple[tuple[float, float], ...]
    """(arrived requests, unallocated GPUs), both in % of capacity, at each whole %."""
    seconds: float

    @property
    def unallocated_gpu_pct(self) -> float:
        return 100.0 * self.unallocated_gpus / self.capacity_gpus


def shuffled_nodes(nodes: Sequence[Node], seed: int) -> list[Node]:
    """The seed's node order, the same for every policy (a cluster's order is arbitrary)."""
    order = list(nodes)
    random.Random(f"nodes:{seed}").shuffle(order)
    return order


def draw_arrivals(
    orders: Sequence[Order], capacity_gpus: int, seed: int, load: float = DEFAULT_LOAD
) -> list[Order]:
    """Orders drawn with replacement until they request `load` times capacity, shuffled."""
    if not any(order.gpus > 0 for order in orders):
        raise ValueError("the workload has no GPU orders to draw from")
    rng = random.Random(f"arrivals:{seed}")
    drawn: list[Order] = []
    requested = 0
    while requested < load * capacity_gpus:
        order = rng.choice(orders)
        drawn.append(order)
        requested += order.gpus
    rng.shuffle(drawn)
    return drawn


def until_full(arrivals: Sequence[Order], capacity_gpus: int) -> list[Order]:
    """The arrivals up to and including the one whose requests reach the capacity."""
    requested = 0
    for i, order in enumerate(arrivals):
        requested += order.gpus
        if requested >= capacity_gpus:
            return list(arrivals[: i + 1])
    return list(arrivals)


def run_arrival(
    nodes: Sequence[Node],
    arrivals: Sequence[Order],
    start: RunFactory,
    seed: int,
    workload: Sequence[Order] | None = None,
) -> ArrivalResult:
    """Place `arrivals` in turn on the seed's node order; nothing ever leaves.

    `workload` is what the arrivals are drawn from (default: the arrivals themselves).
    """
    started = time.perf_counter()
    cluster = start(shuffled_nodes(nodes, seed), arrivals if workload is None else workload, seed)
    cluster.submit(arrivals)
    capacity = cluster.capacity_gpus
    requested = rejected = 0
    at_full: tuple[int, int, int] | None = None
    curve: list[tuple[float, float]] = []
    next_mark = 1
    for arrived, order in enumerate(arrivals, start=1):
        if not cluster.arrive(arrived, order):
            rejected += 1
        requested += order.gpus
        while 100 * requested >= next_mark * capacity:
            unallocated_pct = 100.0 * (capacity - cluster.allocated_gpus) / capacity
            curve.append((float(next_mark), unallocated_pct))
            next_mark += 1
        if at_full is None and requested >= capacity:
            at_full = (arrived, capacity - cluster.allocated_gpus, rejected)
    if at_full is None:
        at_full = (len(arrivals), capacity - cluster.allocated_gpus, rejected)
    return ArrivalResult(
        seed=seed,
        capacity_gpus=capacity,
        arrived_orders=at_full[0],
        unallocated_gpus=at_full[1],
        rejected_orders=at_full[2],
        rejected_orders_total=rejected,
        curve=tuple(curve),
        seconds=time.perf_counter() - started,
    )
