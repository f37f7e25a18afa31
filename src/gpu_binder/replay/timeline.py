"""Timeline mode: orders arrive at their creation time and leave at their deletion time.

An order that fits nowhere when it arrives is rejected (the trace has no retries). The
figures are the rejected orders and the GPU-hours served against those requested.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_binder.replay.arrival import policy_rng, shuffled_nodes
from gpu_binder.replay.cluster import ReplayCluster
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import Policy
from gpu_binder.replay.trace import Node

SECONDS_PER_HOUR = 3600.0
_LEAVE, _ARRIVE = 0, 1


@dataclass(frozen=True, slots=True)
class TimelineResult:
    """One policy's run over the trace's own times, on one seed's node order."""

    seed: int
    capacity_gpus: int
    orders: int
    rejected_orders: int
    gpu_hours_requested: float
    gpu_hours_served: float
    unallocated_gpu_pct: float
    """Share of GPUs unallocated, averaged over time from the first arrival to the last exit."""
    seconds: float


def run_timeline(
    nodes: Sequence[Node], orders: Sequence[Order], policy: Policy, seed: int
) -> TimelineResult:
    """Replay `orders` at their own times on the seed's node order."""
    started = time.perf_counter()
    cluster = ReplayCluster(shuffled_nodes(nodes, seed))
    rng = policy_rng(seed)
    events: list[tuple[int, int, int]] = []
    for i, order in enumerate(orders):
        # Exits come before arrivals at the same second, so what they free can be used.
        events.append((order.created_s, _ARRIVE, i))
        if order.deleted_s > order.created_s:
            events.append((order.deleted_s, _LEAVE, i))
    events.sort()
    placed: dict[int, str] = {}
    rejected = 0
    requested = served = allocated_area = 0.0
    last = events[0][0] if events else 0
    for moment, kind, i in events:
        allocated_area += cluster.allocated_gpus * (moment - last)
        last = moment
        order = orders[i]
        if kind == _ARRIVE:
            gpu_seconds = order.gpus * (order.deleted_s - order.created_s)
            requested += gpu_seconds
            node = policy(order, cluster, rng)
            if node is None:
                rejected += 1
                continue
            cluster.place(order, node)
            served += gpu_seconds
            if order.deleted_s > order.created_s:
                placed[i] = node
            else:
                cluster.remove(order, node)
        elif i in placed:
            cluster.remove(order, placed.pop(i))
    span = (events[-1][0] - events[0][0]) if events else 0
    capacity = cluster.capacity_gpus
    unallocated = 100.0 * (1.0 - allocated_area / (capacity * span)) if span and capacity else 0.0
    return TimelineResult(
        seed=seed,
        capacity_gpus=capacity,
        orders=len(orders),
        rejected_orders=rejected,
        gpu_hours_requested=requested / SECONDS_PER_HOUR,
        gpu_hours_served=served / SECONDS_PER_HOUR,
        unallocated_gpu_pct=unallocated,
        seconds=time.perf_counter() - started,
    )
