"""The replay's cluster state: free GPUs, CPU and memory per node, and where orders sit.

Policies score nodes by their free state, and many nodes share one (every empty node of
a shape, for a start), so nodes are kept in groups of one shape and one free state,
indexed by model and free GPU count: a policy scores a group once, not each node.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass

from gpu_binder.replay.order import Order
from gpu_binder.replay.trace import Node

GroupKey = tuple[int, int, int, int]


class PlacementError(ValueError):
    """An order was placed where it does not fit, or removed from where it is not."""


@dataclass(frozen=True, slots=True)
class Shape:
    """What a node holds when empty; nodes of one shape are interchangeable."""

    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int


class NodeGroup:
    """The nodes of one shape in one free state, by node order (`members[0]` first).

    A group's state never changes (a node that changes state moves to another group),
    so `memo` may cache anything computed from the state for the lifetime of the group.
    """

    __slots__ = ("free_cpu", "free_gpus", "free_mem", "key", "members", "memo", "model", "shape")

    def __init__(self, key: GroupKey, shape: Shape) -> None:
        self.key = key
        self.shape = shape
        self.model = shape.model
        self.free_gpus = key[1]
        self.free_cpu = key[2]
        self.free_mem = key[3]
        self.members: list[int] = []
        self.memo: dict[int, float] = {}

    @property
    def first(self) -> int:
        return self.members[0]


class ReplayCluster:
    """GPU nodes in a given order (the order breaks ties) and the orders placed on them."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        self.names = [node.name for node in self.nodes]
        self._index = {name: i for i, name in enumerate(self.names)}
        if len(self._index) != len(self.names):
            raise ValueError("node names must be unique")
        shape_ids: dict[Shape, int] = {}
        self.shapes: list[Shape] = []
        self.shape_of: list[int] = []
        for node in self.nodes:
            shape = Shape(node.model, node.gpus, node.cpu_milli, node.memory_mib)
            if shape not in shape_ids:
                shape_ids[shape] = len(self.shapes)
                self.shapes.append(shape)
            self.shape_of.append(shape_ids[shape])
        self.free_gpus = [node.gpus for node in self.nodes]
        self.free_cpu = [node.cpu_milli for node in self.nodes]
        self.free_mem = [node.memory_mib for node in self.nodes]
        self.capacity_gpus = sum(self.free_gpus)
        self.allocated_gpus = 0
        self.model_capacity: dict[str, int] = {}
        for node in self.nodes:
            if node.gpus:
                self.model_capacity[node.model] = self.model_capacity.get(node.model, 0) + node.gpus
        self.models = tuple(self.model_capacity)
        self.model_free = dict(self.model_capacity)
        largest = max((node.gpus for node in self.nodes), default=0)
        self.largest_gpus = largest
        self.largest_cpu_milli = max((node.cpu_milli for node in self.nodes), default=0)
        self._buckets: dict[str, list[dict[GroupKey, NodeGroup]]] = {
            model: [{} for _ in range(largest + 1)] for model in self.models
        }
        self._groups: dict[GroupKey, NodeGroup] = {}
        self._group_of: list[NodeGroup | None] = [None] * len(self.nodes)
        for i in range(len(self.nodes)):
            self._enter(i)

    def index(self, node: str) -> int:
        try:
            return self._index[node]
        except KeyError:
            raise PlacementError(f"no node {node!r}") from None

    def groups(self) -> list[NodeGroup]:
        """Every group of nodes with a free GPU."""
        return list(self._groups.values())

    def feasible_groups(self, order: Order) -> list[NodeGroup]:
        """The groups whose nodes fit `order`: acceptable model, free GPUs, CPU and memory."""
        need, cpu, mem = order.gpus, order.cpu_milli, order.memory_mib
        found: list[NodeGroup] = []
        accepted = order.models
        # Models in the cluster's order, not the set's: set order changes with the hash seed.
        for model in self.models:
            if accepted and model not in accepted:
                continue
            buckets = self._buckets[model]
            for free in range(max(need, 1), len(buckets)):
                found.extend(
                    group
                    for group in buckets[free].values()
                    if group.free_cpu >= cpu and group.free_mem >= mem
                )
        return found

    def fits(self, order: Order, i: int) -> bool:
        return (
            order.accepts(self.nodes[i].model)
            and self.free_gpus[i] >= order.gpus
            and self.free_cpu[i] >= order.cpu_milli
            and self.free_mem[i] >= order.memory_mib
        )

    def place(self, order: Order, node: str) -> None:
        i = self.index(node)
        if not self.fits(order, i):
            raise PlacementError(f"order {order.name} does not fit on node {node}")
        self._move(i, -order.gpus, -order.cpu_milli, -order.memory_mib)

    def remove(self, order: Order, node: str) -> None:
        """Give back what `order` took on `node`; the caller knows it was placed there."""
        i = self.index(node)
        shape = self.shapes[self.shape_of[i]]
        if (
            self.free_gpus[i] + order.gpus > shape.gpus
            or self.free_cpu[i] + order.cpu_milli > shape.cpu_milli
            or self.free_mem[i] + order.memory_mib > shape.memory_mib
        ):
            raise PlacementError(f"order {order.name} is not on node {node}")
        self._move(i, order.gpus, order.cpu_milli, order.memory_mib)

    def _move(self, i: int, gpus: int, cpu: int, mem: int) -> None:
        self._leave(i)
        self.free_gpus[i] += gpus
        self.free_cpu[i] += cpu
        self.free_mem[i] += mem
        self.allocated_gpus -= gpus
        self.model_free[self.nodes[i].model] += gpus
        self._enter(i)

    def _enter(self, i: int) -> None:
        free = self.free_gpus[i]
        if free == 0:
            return
        key = (self.shape_of[i], free, self.free_cpu[i], self.free_mem[i])
        group = self._groups.get(key)
        if group is None:
            group = NodeGroup(key, self.shapes[key[0]])
            self._groups[key] = group
            self._buckets[group.model][free][key] = group
        insort(group.members, i)
        self._group_of[i] = group

    def _leave(self, i: int) -> None:
        group = self._group_of[i]
        if group is None:
            return
        self._group_of[i] = None
        members = group.members
        del members[bisect_left(members, i)]
        if not members:
            del self._groups[group.key]
            del self._buckets[group.model][group.free_gpus][group.key]
