"""The order mix: what the binder's orders ask for, as the yardstick of a node's free state.

A free GPU is worth something only if some order can use it. The binder knows every
order (every VM), so it keeps their demands — GPUs, CPU, memory, acceptable classes —
counted by kind, updated as VMs come and go, and reads two figures from them:

- **fragmentation** of a node's free state: the free GPUs that an order drawn from the
  mix could not use there, in expectation (the fragmentation measure of Weng et al.,
  "Beware of Fragmentation", ATC '23, for whole GPUs: an order that fits uses whole
  GPUs, one that does not — wrong class, too many GPUs, too much CPU or memory — leaves
  all of them). While the mix knows no order as big as a class's largest node, a small
  floor share of such orders is assumed, so a whole node keeps its worth before the
  first order that needs one arrives.
- **claims** on a class: the share of all ordered GPUs that orders restricted to some
  classes put on it, so placement can keep scarce classes for the orders that can use
  nothing else. An order is restricted by what it accepts and by what it needs: one that
  asks for 8 GPUs and 120 cores can only run on the classes with nodes that big
  (`set_shapes` tells the mix the node shapes of each class).

Fragmentation is asked for the same free states again and again, and the mix changes by
one order at a time, so answers are cached with the position in a log of changes they
saw: a cached answer catches up by the few changes since, or is recomputed when the lag
is longer than the number of kinds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A node that does not report its CPU or memory: placement reads it as no limit.
UNLIMITED = 1 << 62
# The share of the mix assumed to be orders of a class's largest node size while none is
# known.
WHOLE_NODE_FLOOR = 0.02
# Past this many changes the log is dropped with every cached answer.
_LOG_LIMIT = 8192

FitKey = tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class Demand:
    """One kind of order: GPUs of one of `classes` on one node, with CPU and memory."""

    gpus: int
    cpu_milli: int
    memory_bytes: int
    classes: frozenset[str]

    def fits(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> bool:
        return (
            self.gpus <= gpus
            and self.cpu_milli <= cpu_milli
            and self.memory_bytes <= memory_bytes
            and class_name in self.classes
        )


class Mix:
    """Orders counted by kind, with cached fragmentation answers (see module doc)."""

    def __init__(self, whole_node_floor: float = WHOLE_NODE_FLOOR) -> None:
        self.floor = whole_node_floor
        self.counts: dict[Demand, int] = {}
        self.orders = 0
        self.gpus = 0
        # GPUs ordered per set of acceptable classes, and per set of classes with a node
        # shape that holds the order alone (see effective).
        self.by_classes: dict[frozenset[str], int] = {}
        self.by_effective: dict[frozenset[str], int] = {}
        self._shapes: Mapping[str, frozenset[tuple[int, int, int]]] | None = None
        self._effective: dict[Demand, frozenset[str]] = {}
        self._log: list[tuple[Demand, int]] = []
        # (class, free GPUs, CPU, memory) -> [orders that fit, log position seen].
        self._fitting: dict[FitKey, list[int]] = {}

    def __len__(self) -> int:
        return self.orders

    def add(self, demand: Demand, n: int = 1) -> None:
        """Count n more orders of this kind (n < 0: fewer)."""
        if n == 0 or demand.gpus <= 0:
            return
        count = self.counts.get(demand, 0) + n
        if count < 0:
            raise ValueError(f"more orders of {demand} removed than added")
        if count:
            self.counts[demand] = count
        else:
            del self.counts[demand]
        self.orders += n
        self.gpus += n * demand.gpus
        _tally(self.by_classes, demand.classes, n * demand.gpus)
        _tally(self.by_effective, self.effective(demand), n * demand.gpus)
        if len(self._log) >= _LOG_LIMIT:
            self._log.clear()
            self._fitting.clear()
        else:
            self._log.append((demand, n))

    def set_shapes(self, shapes: Mapping[str, frozenset[tuple[int, int, int]]]) -> None:
        """The node shapes (GPUs of the class, CPU, memory) of each class, for `effective`."""
        if shapes is self._shapes:
            return
        self._shapes = shapes
        self._effective.clear()
        self.by_effective = {}
        for demand, n in self.counts.items():
            _tally(self.by_effective, self.effective(demand), n * demand.gpus)

    def effective(self, demand: Demand) -> frozenset[str]:
        """The accepted classes with a node shape that could hold the order alone."""
        if self._shapes is None:
            return demand.classes
        cached = self._effective.get(demand)
        if cached is None:
            cached = frozenset(
                c
                for c in demand.classes
                if any(
                    demand.fits(c, gpus, cpu, memory)
                    for gpus, cpu, memory in self._shapes.get(c, ())
                )
            )
            self._effective[demand] = cached
        return cached

    def remove(self, demand: Demand) -> None:
        self.add(demand, -1)

    def fitting(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> int:
        """How many known orders a node of this class with this much free could take."""
        key = (class_name, gpus, cpu_milli, memory_bytes)
        cached = self._fitting.get(key)
        end = len(self._log)
        if cached is not None and cached[1] == end:
            return cached[0]
        if cached is not None and end - cached[1] <= len(self.counts):
            count = cached[0]
            for demand, n in self._log[cached[1] :]:
                if demand.fits(class_name, gpus, cpu_milli, memory_bytes):
                    count += n
        else:
            count = sum(
                n
                for demand, n in self.counts.items()
                if demand.fits(class_name, gpus, cpu_milli, memory_bytes)
            )
        self._fitting[key] = [count, end]
        return count

    def fragmentation(
        self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int, whole: int
    ) -> float:
        """Free GPUs of this state that an order drawn from the mix could not use.

        `whole` is the class's largest node size: the floor share of orders of that size
        fits only a state with that many GPUs free.
        """
        if gpus <= 0:
            return 0.0
        floor = self.floor if whole > 0 and not self.knows_whole(class_name, whole) else 0.0
        share = floor if whole <= gpus else 0.0
        if self.orders:
            fitting = self.fitting(class_name, gpus, cpu_milli, memory_bytes)
            share += (1.0 - floor) * fitting / self.orders
        return gpus * max(0.0, 1.0 - share)

    def knows_whole(self, class_name: str, whole: int) -> bool:
        """Does the mix hold an order of the class as big as its largest node?"""
        if not self.orders:
            return False
        at_least = self.fitting(class_name, whole, UNLIMITED, UNLIMITED)
        return at_least > self.fitting(class_name, whole - 1, UNLIMITED, UNLIMITED)

    def claims(self, capacity: Mapping[str, int]) -> dict[str, float]:
        """Per class, the share of all ordered GPUs that restricted orders put on it.

        An order accepting several classes claims each in proportion to its capacity; one
        accepting every class there is claims nothing, as it can go anywhere.
        """
        claims = dict.fromkeys(capacity, 0.0)
        present = frozenset(c for c, n in capacity.items() if n > 0)
        if not self.gpus or not present:
            return claims
        for classes, gpus in self.by_effective.items():
            accepted = [c for c in classes if c in present]
            if not accepted or present <= classes:
                continue
            room = sum(capacity[c] for c in accepted)
            for c in accepted:
                claims[c] += gpus * capacity[c] / room / self.gpus
        return claims


def _tally(index: dict[frozenset[str], int], key: frozenset[str], gpus: int) -> None:
    total = index.get(key, 0) + gpus
    if total:
        index[key] = total
    else:
        index.pop(key, None)


def pressures(
    claims: Mapping[str, float], free: Mapping[str, int], free_total: int
) -> dict[str, float]:
    """Per class, the share of its free GPUs that restricted orders will claim as the
    cluster fills: if every free GPU went to an order of the mix, restricted orders would
    claim claims[c] × free_total of class c; above 1 the class is oversubscribed."""
    return {c: claims.get(c, 0.0) * free_total / n if n > 0 else 0.0 for c, n in free.items()}
