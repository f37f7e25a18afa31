"""The order mix: what the binder's orders ask for, as the yardstick of a node's free state.

A free GPU is worth something only if some order can use it. The binder knows every
order (every VM), so it keeps their demands — GPUs, CPU, memory, acceptable classes —
counted by kind, updated as VMs come and go, and reads from them the

- **fragmentation** of a node's free state: the free GPUs that an order drawn from the
  mix would leave unusable there, in expectation (the fragmentation measure of Weng et
  al., "Beware of Fragmentation", ATC '23, for whole GPUs: an order that does not fit —
  wrong class, too many GPUs, too much CPU or memory — leaves all of them). An order that
  fits uses its GPUs, and the node's other free GPUs stay usable only as far as the CPU
  and memory it leaves can feed them at the mix's average CPU and memory per GPU: a node
  whose last GPU has no cores left is as stranded as one whose GPUs are too few. A floor
  share of orders as big as a class's largest node is assumed beyond the known ones, so
  a whole node keeps its worth before the orders that need one arrive: by the rule of
  succession, with one look at the mix (placement.recent) worth of orders assumed of that
  size — while none is known, the chance of a kind not seen yet, and never less than a
  small constant.
What the restricted orders will claim of each class and pool, and the risk of breaking a
whole node, are read from these counts by `placement.claims`.

Fragmentation is asked for the same free states again and again, and the mix changes by
one order at a time, so answers are cached with the position in a log of changes they
saw: a cached answer catches up by the few changes since, or is recomputed when the lag
is longer than the number of kinds. The average CPU and memory per GPU that fragmentation
reads are those of the mix when the cached answers were started, renewed (and the
answers with them) once the mix's averages have moved by more than a small tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

# A node that does not report its CPU or memory: placement reads it as no limit.
UNLIMITED = 1 << 62
# The least share of the mix assumed to be orders of a class's largest node size while
# none is known; more while the orders seen leave much unseen (Mix.floor_share).
WHOLE_NODE_FLOOR = 0.02
# The share of the GPUs still free assumed to go to orders that only one class serves,
# beyond the restricted orders known (see claims.pressures): a prior from the cluster's own
# shape, which prices a small class above a large one before the orders that need it are
# seen (docs/PLACEMENT.md, *Kept: a prior on the classes' restricted orders*).
CLASS_PRIOR = 0.1
# Past this many changes the log is dropped with every cached answer.
_LOG_LIMIT = 8192
# How far (relatively) the mix's average CPU or memory per GPU may move before the
# fragmentation answers cached on the old averages are dropped.
_BASIS_TOLERANCE = 1 / 32

FitKey = tuple[str, int, int, int]
NeedKey = tuple[str, str, tuple[int, int, int] | None]
# A pool: a class's nodes of one shape (the class's GPUs on the node, its CPU, memory).
Pool = tuple[str, int, int, int]
# What orders are tallied and cached answers kept by.
H = TypeVar("H", bound=Hashable)
# The CPU (millicores) and memory (bytes) per GPU that fragmentation feeds GPUs with.
Basis = tuple[float, float]


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

    def strands(
        self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int, basis: Basis
    ) -> float:
        """Free GPUs of a node in this state that an order of this kind leaves unusable.

        All of them when it does not fit; otherwise those of the rest that the CPU and
        memory it leaves cannot feed at `basis` per GPU.
        """
        if not self.fits(class_name, gpus, cpu_milli, memory_bytes):
            return float(gpus)
        rest = gpus - self.gpus
        fed = float(rest)
        cpu_per_gpu, memory_per_gpu = basis
        if cpu_per_gpu > 0:
            fed = min(fed, (cpu_milli - self.cpu_milli) / cpu_per_gpu)
        if memory_per_gpu > 0:
            fed = min(fed, (memory_bytes - self.memory_bytes) / memory_per_gpu)
        return rest - fed


class Mix:
    """Orders counted by kind, with cached fragmentation answers (see module doc)."""

    def __init__(
        self, whole_node_floor: float = WHOLE_NODE_FLOOR, class_prior: float = CLASS_PRIOR
    ) -> None:
        self.floor = whole_node_floor
        self.prior = class_prior
        # The share of the orders to come assumed of kinds not seen yet; the mix counts
        # kinds, not the order they came in, so its keeper says (Recent.unseen_share).
        self.unseen_share: Callable[[], float] = _nothing_unseen
        self.counts: dict[Demand, int] = {}
        self.orders = 0
        self.gpus = 0
        self.cpu_milli = 0
        self.memory_bytes = 0
        # GPUs ordered per set of acceptable classes, and per set of classes with a node
        # shape that holds the order alone (see effective).
        self.by_classes: dict[frozenset[str], int] = {}
        self.by_effective: dict[frozenset[str], int] = {}
        # The same for the orders only an entirely free largest node of a class holds.
        self.by_whole: dict[frozenset[str], int] = {}
        # The same for the restricted orders, per set of pools that hold them (see pools).
        self.by_pools: dict[tuple[Pool, ...], int] = {}
        self._shapes: Mapping[str, frozenset[tuple[int, int, int]]] | None = None
        self._effective: dict[Demand, frozenset[str]] = {}
        self._pools: dict[Demand, tuple[Pool, ...]] = {}
        self._log: list[tuple[Demand, int]] = []
        # (class, free GPUs, CPU, memory) -> [orders that fit, log position seen].
        self._fitting: dict[FitKey, list[int]] = {}
        # The same for the restricted orders (see serves_claims).
        self._serving: dict[FitKey, list[int]] = {}
        # (class, instead of class, pool shape or None) -> [orders needing it, log position].
        self._needing: dict[NeedKey, list[int]] = {}
        # The same -> (GPUs the known orders would strand there, summed; log position),
        # all on one basis.
        self._stranded: dict[FitKey, tuple[float, int]] = {}
        self._basis: Basis = (0.0, 0.0)

    @property
    def shapes(self) -> Mapping[str, frozenset[tuple[int, int, int]]] | None:
        """The node shapes of each class, as set_shapes gave them."""
        return self._shapes

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
        self.cpu_milli += n * demand.cpu_milli
        self.memory_bytes += n * demand.memory_bytes
        tally(self.by_classes, demand.classes, n * demand.gpus)
        self._tally_effective(demand, n)
        if len(self._log) >= _LOG_LIMIT:
            self._log.clear()
            self._fitting.clear()
            self._serving.clear()
            self._needing.clear()
            self._stranded.clear()
        else:
            self._log.append((demand, n))

    def set_shapes(self, shapes: Mapping[str, frozenset[tuple[int, int, int]]]) -> None:
        """The node shapes (GPUs of the class, CPU, memory) of each class, for `effective`."""
        if shapes is self._shapes:
            return
        self._shapes = shapes
        self._effective.clear()
        self._pools.clear()
        self._serving.clear()
        self._needing.clear()
        self.by_effective = {}
        self.by_whole = {}
        self.by_pools = {}
        for demand, n in self.counts.items():
            self._tally_effective(demand, n)

    def _tally_effective(self, demand: Demand, n: int) -> None:
        effective = self.effective(demand)
        tally(self.by_effective, effective, n * demand.gpus)
        pools = self.pools(demand)
        if pools:
            tally(self.by_pools, pools, n * demand.gpus)
        if self._shapes is not None and effective:
            largest = (max(g for g, _, _ in self._shapes[c]) for c in effective)
            if all(demand.gpus >= size for size in largest):
                tally(self.by_whole, effective, n * demand.gpus)

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

    def pools(self, demand: Demand) -> tuple[Pool, ...]:
        """The pools that could hold a restricted order alone: none for an order every
        pool holds, or without node shapes. An order every class holds may still be
        restricted by its pools — a 60 GiB single that no 1-GPU node of 48 GiB holds
        claims the pools with the memory for it (sweep draw 11006, docs/PLACEMENT.md)."""
        shapes = self._shapes
        if shapes is None:
            return ()
        cached = self._pools.get(demand)
        if cached is None:
            held = sorted(
                (c, gpus, cpu, memory)
                for c in self.effective(demand)
                for gpus, cpu, memory in shapes.get(c, ())
                if demand.fits(c, gpus, cpu, memory)
            )
            every = sum(len(of_class) for of_class in shapes.values())
            cached = () if len(held) == every else tuple(held)
            self._pools[demand] = cached
        return cached

    def remove(self, demand: Demand) -> None:
        self.add(demand, -1)

    def fitting(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> int:
        """How many known orders a node of this class with this much free could take."""

        def fits(demand: Demand) -> bool:
            return demand.fits(class_name, gpus, cpu_milli, memory_bytes)

        return self._count(self._fitting, (class_name, gpus, cpu_milli, memory_bytes), fits)

    def _count(self, cache: dict[H, list[int]], key: H, counts: Callable[[Demand], bool]) -> int:
        """The known orders of the kinds `counts` picks, cached under key with the log
        position seen: caught up by the changes since, recounted when those outnumber the
        kinds."""
        cached = cache.get(key)
        end = len(self._log)
        if cached is not None and cached[1] == end:
            return cached[0]
        if cached is not None and end - cached[1] <= len(self.counts):
            count = cached[0] + sum(n for demand, n in self._log[cached[1] :] if counts(demand))
        else:
            count = sum(n for demand, n in self.counts.items() if counts(demand))
        cache[key] = [count, end]
        return count

    @property
    def basis(self) -> Basis:
        """The CPU and memory per GPU fragmentation feeds a node's GPUs with: the mix's
        averages, renewed when they have moved past the tolerance."""
        if not self.gpus:
            return self._basis
        now = (self.cpu_milli / self.gpus, self.memory_bytes / self.gpus)
        if any(abs(a - b) > _BASIS_TOLERANCE * a for a, b in zip(now, self._basis, strict=True)):
            self._basis = now
            self._stranded.clear()
        return self._basis

    def stranded(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> float:
        """GPUs the known orders would strand on a node of this class with this much free,
        summed over the orders (see Demand.strands)."""
        basis = self.basis
        key = (class_name, gpus, cpu_milli, memory_bytes)
        cached = self._stranded.get(key)
        end = len(self._log)
        if cached is not None and cached[1] == end:
            return cached[0]
        if cached is not None and end - cached[1] <= len(self.counts):
            total = cached[0]
            for demand, n in self._log[cached[1] :]:
                total += n * demand.strands(class_name, gpus, cpu_milli, memory_bytes, basis)
        else:
            total = sum(
                n * demand.strands(class_name, gpus, cpu_milli, memory_bytes, basis)
                for demand, n in self.counts.items()
            )
        self._stranded[key] = (total, end)
        return total

    def fragmentation(
        self,
        class_name: str,
        gpus: int,
        cpu_milli: int,
        memory_bytes: int,
        whole: int,
        floor: float | None = None,
    ) -> float:
        """Free GPUs of this state that an order drawn from the mix would leave unusable.

        `whole` is the class's largest node size: the floor share of orders of that size
        fits only a state with that many GPUs free, and uses all of them (`floor`, if
        given, is `floor_share(class_name, whole)`, read once for several states).
        """
        if gpus <= 0:
            return 0.0
        if floor is None:
            floor = self.floor_share(class_name, whole)
        stranded = 0.0 if whole <= gpus else floor * gpus
        if self.orders:
            mean = self.stranded(class_name, gpus, cpu_milli, memory_bytes) / self.orders
        else:
            mean = float(gpus)
        return stranded + (1.0 - floor) * max(0.0, mean)

    def unfit_share(
        self,
        class_name: str,
        gpus: int,
        cpu_milli: int,
        memory_bytes: int,
        whole: int,
        floor: float | None = None,
    ) -> float:
        """The share of the mix (the whole-node floor included, as in `fragmentation`) that
        a node of this class with this much free cannot take at all."""
        if floor is None:
            floor = self.floor_share(class_name, whole)
        below_whole = floor if gpus < whole else 0.0
        if not self.orders:
            return below_whole + (1.0 - floor)  # as fragmentation reads an empty mix
        fitting = self.fitting(class_name, gpus, cpu_milli, memory_bytes)
        return below_whole + (1.0 - floor) * (1.0 - fitting / self.orders)

    def floor_share(self, class_name: str, whole: int) -> float:
        """The share of orders of the class's largest node size assumed beyond the known
        ones. While none is known: the chance an order to come is of a kind not seen yet
        (the unseen share, by the rule of succession over the looks at the mix:
        placement.recent), as the cluster's largest nodes say what such an order may need
        (operators buy 8-GPU nodes for 8-GPU orders), and at least the constant floor.
        Once some are known, the same rule over orders with one look's worth of pseudo-
        orders for them, less their known share: the first ones known count toward the
        floor rather than end it — ended at the first, it made the nodes they need
        cheaper the moment they came (sweep draw 1, docs/PLACEMENT.md)."""
        if whole <= 0:
            return 0.0
        unseen = self.unseen_share()
        known = self.whole_share(class_name, whole)
        if not known:
            return max(self.floor, unseen)
        # With L looks at N orders (unseen = 1 / (L + 2)) and n of them known, a look's
        # worth is N / L orders: (n + N/L) / (N + 2N/L) - n/N = (1 - 2n/N) / (L + 2).
        return max(0.0, (1.0 - 2.0 * known) * unseen)

    def whole_share(self, class_name: str, whole: int) -> float:
        """The share of the known orders that are of the class's largest node size."""
        if not self.orders:
            return 0.0
        at_most = self.fitting(class_name, whole, UNLIMITED, UNLIMITED)
        return (at_most - self.fitting(class_name, whole - 1, UNLIMITED, UNLIMITED)) / self.orders

    def needs_instead(
        self, class_name: str, instead_of: str, shape: tuple[int, int, int] | None = None
    ) -> bool:
        """Does a known order need GPUs of class_name where it cannot use instead_of's: one
        whose classes with a node shape that holds it (`effective`) hold the one and not
        the other? An order that could use either, taking class_name's, would displace it.

        With a shape (GPUs, CPU, memory), only the orders a node of that shape of the
        class holds alone count: the 8-GPU orders that only a class's 8-GPU nodes hold do
        not need its 1-GPU nodes (sweep draw 3, docs/PLACEMENT.md)."""

        def needs(demand: Demand) -> bool:
            if shape is None:
                holds = class_name in self.effective(demand)
            else:
                holds = demand.fits(class_name, *shape)
            return holds and instead_of not in self.effective(demand)

        return self._count(self._needing, (class_name, instead_of, shape), needs) > 0

    def serves_claims(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> bool:
        """Could a node of this class with this much free take a restricted order that
        claims the class (see claims.pressures)? If not, taking its GPUs costs those orders
        nothing: a 1-GPU node is no use to the 8-GPU orders only its class holds, nor are
        GPUs left without the memory they ask for."""

        def claims(demand: Demand) -> bool:
            return self._claims(demand, class_name, gpus, cpu_milli, memory_bytes)

        key = (class_name, gpus, cpu_milli, memory_bytes)
        return self._count(self._serving, key, claims) > 0

    def _claims(
        self, demand: Demand, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int
    ) -> bool:
        """Is the order restricted (not every pool holds it, see `pools`; without node
        shapes, any order counts) and does it fit?"""
        if self._shapes is not None and not self.pools(demand):
            return False
        return demand.fits(class_name, gpus, cpu_milli, memory_bytes)


def tally(index: dict[H, int], key: H, gpus: int) -> None:
    """Add gpus to key's count, which leaves the index when it comes to zero."""
    total = index.get(key, 0) + gpus
    if total:
        index[key] = total
    else:
        index.pop(key, None)


def _nothing_unseen() -> float:
    """A mix told nothing of the order its orders came in assumes only the floor."""
    return 0.0
