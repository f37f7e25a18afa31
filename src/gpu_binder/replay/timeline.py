"""Timeline mode: orders arrive at their creation time and leave at their deletion time.

An order that fits nowhere when it arrives is rejected (the trace has no retries). The
figures are the rejected orders and the GPU-hours served against those requested.

At the trace's own pace the cluster is nearly idle (the default trace never holds more
than 71 of its 6,212 GPUs at once: most tasks last minutes, spread over 149 days), so
every policy serves everything and the mode says nothing. Two knobs make it informative:

- `load`: the trace's orders, drawn with replacement with their own lifetimes, arrive as
  a Poisson stream offering `load` × capacity (the trace's whole GPU-time fills the
  cluster only once, so bringing its own arrivals closer cannot load it: all at once,
  its tasks would keep 12% of the GPUs busy over the first second);
- `stopped_s`: a VM whose run ended stays stopped that long before it is deleted,
  keeping its GPUs reserved (a stopped KubeVirt VM keeps its set, DESIGN §3 orders) —
  the sets the binder's defragmentation may move to make room.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from gpu_binder.replay.arrival import shuffled_nodes
from gpu_binder.replay.order import Order
from gpu_binder.replay.policy import RunFactory
from gpu_binder.replay.trace import Node

SECONDS_PER_HOUR = 3600.0
# At one moment: exits first (what they free can be used), then stops, then arrivals.
_LEAVE, _STOP, _ARRIVE = 0, 1, 2


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
    """Share of GPUs unallocated, averaged over time from the first arrival to the last (the
    tail after it, where the longest tasks run out alone, would only dilute it)."""
    seconds: float
    moves: int = 0
    """Sets of stopped VMs the contender moved to make room (the binder's defragmentation)."""


def resample(
    orders: Sequence[Order], capacity_gpus: int, load: float, seed: int, count: int
) -> list[Order]:
    """`count` orders drawn with replacement, each with its own duration, arriving as a
    Poisson stream at the pace at which the GPUs they ask for average `load` × capacity
    while arrivals last (the trace's mix of orders and lifetimes at a pace that fills
    the cluster). Lifetimes run up to months, so the pace is found by bisection on what
    each order asks for inside the window, not on its whole GPU-time."""
    timed = [o for o in orders if o.deleted_s > o.created_s]
    if not timed or load <= 0 or count <= 0:
        return []
    demand = [(o.gpus, o.deleted_s - o.created_s) for o in timed]

    def asked(rate: float) -> float:
        # Mean GPUs asked for over [0, W] by a Poisson stream of `count` arrivals: an order
        # of d seconds arriving uniformly in the window is inside it d - d²/2W on average.
        window = count / rate
        inside = fmean(
            g * (d - d * d / (2 * window) if d < window else window / 2) for g, d in demand
        )
        return rate * inside / capacity_gpus

    low, high = 1e-9, 1e6
    for _ in range(100):
        mid = (low * high) ** 0.5
        if asked(mid) < load:
            low = mid
        else:
            high = mid
    rate = high
    rng = random.Random(f"timeline:{seed}")
    out: list[Order] = []
    moment = 0.0
    for i in range(count):
        moment += rng.expovariate(rate)
        o = rng.choice(timed)
        created = round(moment)
        out.append(
            Order(
                f"{o.name}#{i}",
                o.gpus,
                o.cpu_milli,
                o.memory_mib,
                o.models,
                created,
                created + (o.deleted_s - o.created_s),
            )
        )
    return out


def run_timeline(
    nodes: Sequence[Node],
    orders: Sequence[Order],
    start: RunFactory,
    seed: int,
    stopped_s: int = 0,
) -> TimelineResult:
    """Replay `orders` at their own times on the seed's node order."""
    started = time.perf_counter()
    cluster = start(shuffled_nodes(nodes, seed), orders, seed)
    events: list[tuple[int, int, int]] = []
    for i, order in enumerate(orders):
        events.append((order.created_s, _ARRIVE, i))
        if order.deleted_s > order.created_s or stopped_s > 0:
            if stopped_s > 0:
                events.append((order.deleted_s, _STOP, i))
            events.append((order.deleted_s + stopped_s, _LEAVE, i))
    events.sort()
    placed: set[int] = set()
    rejected = 0
    requested = served = allocated_area = 0.0
    first = last = events[0][0] if events else 0
    end = max((o.created_s for o in orders), default=0)
    for moment, kind, i in events:
        if last < end:
            allocated_area += cluster.allocated_gpus * (min(moment, end) - last)
        last = moment
        order = orders[i]
        if kind == _ARRIVE:
            gpu_seconds = order.gpus * (order.deleted_s - order.created_s)
            requested += gpu_seconds
            if not cluster.arrive(i, order):
                rejected += 1
                continue
            served += gpu_seconds
            if order.deleted_s > order.created_s or stopped_s > 0:
                placed.add(i)
            else:
                cluster.leave(i, order)
        elif i not in placed:
            continue
        elif kind == _STOP:
            cluster.stop(i, order)
        else:
            placed.discard(i)
            cluster.leave(i, order)
    span = end - first
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
        moves=int(getattr(cluster, "moves", 0)),
    )
