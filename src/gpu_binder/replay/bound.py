"""The model-capacity bound: how many ordered GPUs any placement could serve at best.

GPU units flow from orders, grouped by the set of models they accept, to the models'
capacities; nodes are ignored, so no policy can allocate more than the maximum flow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from gpu_binder.replay.order import DemandKey, Order
from gpu_binder.replay.trace import Node


def demand_by_models(orders: Iterable[Order]) -> dict[frozenset[str], int]:
    """Ordered GPUs per set of acceptable models (the empty set accepts any)."""
    demand: dict[frozenset[str], int] = {}
    for order in orders:
        demand[order.models] = demand.get(order.models, 0) + order.gpus
    return demand


def demand_by_fitting_models(
    orders: Iterable[Order], nodes: Sequence[Node]
) -> dict[frozenset[str], int]:
    """Ordered GPUs per set of models that accept the order and have a node it fits alone.

    This tightens the bound by the orders no node could ever hold (say 8 GPUs of a
    model with 96 cores for an order of 120); nodes are still ignored otherwise.
    """
    largest: dict[str, list[tuple[int, int, int]]] = {}
    for node in nodes:
        if node.gpus:
            largest.setdefault(node.model, []).append((node.gpus, node.cpu_milli, node.memory_mib))
    fitting: dict[DemandKey, frozenset[str]] = {}
    demand: dict[frozenset[str], int] = {}
    for order in orders:
        models = fitting.get(order.demand)
        if models is None:
            models = frozenset(
                model
                for model, shapes in largest.items()
                if order.accepts(model)
                and any(
                    gpus >= order.gpus and cpu >= order.cpu_milli and mem >= order.memory_mib
                    for gpus, cpu, mem in shapes
                )
            )
            fitting[order.demand] = models
        if models:
            demand[models] = demand.get(models, 0) + order.gpus
    return demand


def max_servable_gpus(demand: Mapping[frozenset[str], int], capacity: Mapping[str, int]) -> int:
    """The maximum flow of GPUs from model sets to the models they accept."""
    sets = [models for models, gpus in demand.items() if gpus > 0]
    models = [model for model, gpus in capacity.items() if gpus > 0]
    # Vertices: 0 source, 1 sink, then one per model set, then one per model.
    first_model = 2 + len(sets)
    size = first_model + len(models)
    residual = [[0] * size for _ in range(size)]
    for s, accepted in enumerate(sets):
        residual[0][2 + s] = demand[accepted]
        for m, model in enumerate(models):
            if not accepted or model in accepted:
                residual[2 + s][first_model + m] = demand[accepted]
    for m, model in enumerate(models):
        residual[first_model + m][1] = capacity[model]
    flow = 0
    while (path := _augmenting_path(residual)) is not None:
        pushed = min(residual[u][v] for u, v in path)
        for u, v in path:
            residual[u][v] -= pushed
            residual[v][u] += pushed
        flow += pushed
    return flow


def unallocated_bound_pct(
    demand: Mapping[frozenset[str], int], capacity: Mapping[str, int]
) -> float:
    """The least share of capacity (in %) that must stay unallocated under this demand."""
    total = sum(capacity.values())
    if total == 0:
        return 0.0
    return 100.0 * (total - max_servable_gpus(demand, capacity)) / total


def _augmenting_path(residual: list[list[int]]) -> list[tuple[int, int]] | None:
    """A shortest source-to-sink path with room left (Edmonds-Karp), as its edges."""
    parent: list[int | None] = [None] * len(residual)
    parent[0] = 0
    queue = deque([0])
    while queue:
        u = queue.popleft()
        for v, room in enumerate(residual[u]):
            if room > 0 and parent[v] is None:
                parent[v] = u
                if v == 1:
                    path: list[tuple[int, int]] = []
                    while v != 0:
                        prev = parent[v]
                        assert prev is not None
                        path.append((prev, v))
                        v = prev
                    return path
                queue.append(v)
    return None
