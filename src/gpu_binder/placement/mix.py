"""The order mix: what the binder's orders ask for, as the yardstick of a node's free state.

A free GPU is worth something only if some order can use it. The binder knows every
order (every VM), so it keeps their demands — GPUs, CPU, memory, acceptable classes —
counted by kind, updated as VMs come and go, and reads two figures from them:

- **fragmentation** of a node's free state: the free GPUs that an order drawn from the
  mix would leave unusable there, in expectation (the fragmentation measure of Weng et
  al., "Beware of Fragmentation", ATC '23, for whole GPUs: an order that does not fit —
  wrong class, too many GPUs, too much CPU or memory — leaves all of them). An order that
  fits uses its GPUs, and the node's other free GPUs stay usable only as far as the CPU
  and memory it leaves can feed them at the mix's average CPU and memory per GPU: a node
  whose last GPU has no cores left is as stranded as one whose GPUs are too few. While
  the mix knows no order as big as a class's largest node, a small floor share of such
  orders is assumed, so a whole node keeps its worth before the first order that needs
  one arrives.
- **pressure** on a class: the share of its free GPUs that orders restricted to some
  classes will claim as the cluster fills, so placement can keep scarce classes for the
  orders that can use nothing else. An order is restricted by what it accepts and by
  what it needs: one that asks for 8 GPUs and 120 cores can only run on the classes with
  nodes that big (`set_shapes` tells the mix the node shapes of each class).
- **whole-node risk** of a class: the chance that breaking one of its entirely free
  largest nodes turns away an order that needs such a node before the cluster is full.
  Free GPUs may be plenty while the whole nodes a big order needs are few: small orders
  break them one by one, and a model's last whole nodes go first where the orders that
  can use nothing else are few, as a small count of arrivals varies the most.

Fragmentation is asked for the same free states again and again, and the mix changes by
one order at a time, so answers are cached with the position in a log of changes they
saw: a cached answer catches up by the few changes since, or is recomputed when the lag
is longer than the number of kinds. The average CPU and memory per GPU that fragmentation
reads are those of the mix when the cached answers were started, renewed (and the
answers with them) once the mix's averages have moved by more than a small tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

# A node that does not report its CPU or memory: placement reads it as no limit.
UNLIMITED = 1 << 62
# The share of the mix assumed to be orders of a class's largest node size while none is
# known.
WHOLE_NODE_FLOOR = 0.02
# The share of the GPUs still free assumed to go to orders that only one class serves,
# beyond the restricted orders known (see pressures): a prior from the cluster's own
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
# What claims are poured into (classes or pools), and what orders are tallied by.
K = TypeVar("K", str, Pool)
T = TypeVar("T", frozenset[str], tuple[Pool, ...])
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
        """The pools that could hold a restricted order alone (none for an order every
        class holds, or without node shapes)."""
        shapes = self._shapes
        effective = self.effective(demand)
        if shapes is None or frozenset(shapes) <= effective:
            return ()
        return tuple(
            sorted(
                (c, gpus, cpu, memory)
                for c in effective
                for gpus, cpu, memory in shapes.get(c, ())
                if demand.fits(c, gpus, cpu, memory)
            )
        )

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
        """The share of orders of the class's largest node size assumed while none is known."""
        return self.floor if whole > 0 and not self.knows_whole(class_name, whole) else 0.0

    def knows_whole(self, class_name: str, whole: int) -> bool:
        """Does the mix hold an order of the class as big as its largest node?"""
        if not self.orders:
            return False
        at_least = self.fitting(class_name, whole, UNLIMITED, UNLIMITED)
        return at_least > self.fitting(class_name, whole - 1, UNLIMITED, UNLIMITED)

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

    def pressures(self, capacity: Mapping[str, int], free: Mapping[str, int]) -> dict[str, float]:
        """Per class, the share of its free GPUs that restricted orders will claim as the
        cluster fills (above 1 the class is oversubscribed).

        If every free GPU went to an order of the mix, the orders restricted to a set of
        classes would ask for their share of them, from whichever of their classes has
        room. They are poured in narrowest set first (the fewest alternatives), each into
        its least claimed classes until those are claimed alike: the balanced split of
        the flow bound. So among the known orders, a class accepted by every restricted
        order that accepts another is never cheaper than that one, however the two fill.
        An order accepting every class there is claims nothing, as it can go anywhere.

        The prior (CLASS_PRIOR) adds a claim of the orders not yet seen that only one
        class serves, split among the classes by `prior_split`: evenly while no
        restricted order is known. The same GPUs claimed of a small class are a larger
        share of it, so while every known order may go anywhere, flexible orders go to
        the large classes and leave the small ones to the orders that will need them
        (sweep draw 6000: flexible orders filled T4 and V100 before the orders
        restricted to them came, docs/PLACEMENT.md).
        """
        present = frozenset(c for c, n in capacity.items() if n > 0)
        free_total = sum(free.get(c, 0) for c in present)
        claimed = dict.fromkeys(present, 0.0)
        if self.gpus and free_total:
            sets: list[tuple[int, list[str], int]] = []
            for classes, gpus in self.by_effective.items():
                room = sorted(c for c in classes & present if free.get(c, 0) > 0)
                if room and not present <= classes:
                    sets.append((len(room), room, gpus))
            for _, room, gpus in sorted(sets):
                _pour(claimed, free, room, free_total * gpus / self.gpus)
            split = self.prior_split(present)
            for c in present:
                if free.get(c, 0) > 0:
                    claimed[c] += free_total * self.prior * split[c]
        return {c: claimed[c] / n if c in claimed and n > 0 else 0.0 for c, n in free.items()}

    def pool_pressures(self, free: Mapping[Pool, int]) -> dict[Pool, float]:
        """Per pool, the share of its free GPUs the restricted orders will claim: as
        `pressures` pours them into their classes, but into the pools of those classes
        that hold them, so a class's pool that most of its claims cannot use (1-GPU nodes
        for 8-GPU claims, 32 GiB nodes for 96 GiB ones) is priced by the claims it can
        take, and the pool they must go to by all of theirs.

        While the mix knows no order as big as a class's largest node, the whole-node
        floor's assumed orders (see fragmentation) claim the class's largest pools as
        well: otherwise a pool that only orders not yet seen will need looked the cheapest
        to the orders seen (sweep draws 4005 and 5019, docs/PLACEMENT.md).

        The prior's claim on a class (see pressures) is spread over its pools by their
        free GPUs, not poured into the least claimed: it says nothing of the shape the
        orders to come need, so the order of a class's pools stays the known claims' (a
        pool only known claims fit stays dearer than one they do not, draw 4005)."""
        free_total = sum(free.values())
        claimed = {p: 0.0 for p, n in free.items() if n > 0}
        if self.gpus and free_total:
            sets: list[tuple[int, list[Pool], float]] = []
            for pools, gpus in self.by_pools.items():
                room = [p for p in pools if p in claimed]
                if room:
                    sets.append((len(room), room, gpus))
            for c, shapes in (self._shapes or {}).items():
                size = max((g for g, _, _ in shapes), default=0)
                share = self.floor_share(c, size)
                if not share:
                    continue
                room = sorted((c, g, cpu, memory) for g, cpu, memory in shapes if g == size)
                room = [p for p in room if p in claimed]
                if room:
                    # In GPUs ordered: the floor's share of the orders, each of `size`.
                    sets.append((len(room), room, share * size * self.orders))
            for _, room, ordered in sorted(sets):
                _pour(claimed, free, room, free_total * ordered / self.gpus)
            self._spread_prior(claimed, free, free_total)
        return {p: claimed[p] / free[p] for p in claimed}

    def _spread_prior(
        self, claimed: dict[Pool, float], free: Mapping[Pool, int], free_total: int
    ) -> None:
        """Add each class's prior claim to its pools, in proportion to their free GPUs."""
        classes = self._shapes or {}
        split = self.prior_split(frozenset(classes))
        for c, shapes in classes.items():
            room = [p for p in ((c, *shape) for shape in shapes) if p in claimed]
            class_free = sum(free[p] for p in room)
            if class_free:
                level = free_total * self.prior * split[c] / class_free
                for p in room:
                    claimed[p] += level * free[p]

    def prior_split(self, classes: frozenset[str]) -> dict[str, float]:
        """Per class, its part of the prior's claim: the known restricted orders' GPUs
        shared among the classes each accepts, plus one average order's worth for every
        class (the even split before any is known, outweighed once they are many).

        Which class the orders to come need alone is a guess before any is seen, and the
        even guess taxes the small classes most; where the restricted orders known need
        the large class (their classes drawn by capacity, sweep draw 9005), an even split
        kept the small classes free while the large one's own orders found it full.
        With one class, no order needs it rather than another: no prior (its price
        would only weigh the GPUs stranded there again, sweep draw 2007)."""
        if len(classes) < 2:
            return dict.fromkeys(classes, 0.0)
        pseudo = self.gpus / self.orders if self.orders else 1.0
        parts = dict.fromkeys(classes, pseudo)
        for accepted, gpus in self.by_effective.items():
            room = accepted & classes
            if room and not classes <= accepted:
                for c in room:
                    parts[c] += gpus / len(room)
        total = sum(parts.values())
        return {c: part / total for c, part in parts.items()}

    def serves_claims(self, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int) -> bool:
        """Could a node of this class with this much free take a restricted order that
        claims the class (see pressures)? If not, taking its GPUs costs those orders
        nothing: a 1-GPU node is no use to the 8-GPU orders only its class holds, nor are
        GPUs left without the memory they ask for."""

        def claims(demand: Demand) -> bool:
            return self._claims(demand, class_name, gpus, cpu_milli, memory_bytes)

        key = (class_name, gpus, cpu_milli, memory_bytes)
        return self._count(self._serving, key, claims) > 0

    def _claims(
        self, demand: Demand, class_name: str, gpus: int, cpu_milli: int, memory_bytes: int
    ) -> bool:
        """Is the order restricted (not every class with nodes holds it; without node
        shapes, any order counts) and does it fit?"""
        if self._shapes is not None and frozenset(self._shapes) <= self.effective(demand):
            return False
        return demand.fits(class_name, gpus, cpu_milli, memory_bytes)

    def whole_risks(
        self, free: Mapping[str, int], whole_free: Mapping[str, int], sizes: Mapping[str, int]
    ) -> dict[str, float]:
        """Per class with whole nodes free, the chance that breaking one of them turns away
        an order that needs one before the cluster is full.

        `whole_free` counts the GPUs on a class's entirely free nodes of its largest size
        (`sizes`). The orders that need such a node are poured into those GPUs as
        `pressures` pours restricted orders (narrowest set first, balanced), which gives
        each class the whole-node orders expected to come for it as the free GPUs fill.
        Arriving one by one at random, their number is Poisson; a node broken now is
        missed when they are at least as many as the class's whole nodes.
        """
        free_total = sum(free.values())
        claimed = {c: 0.0 for c, n in whole_free.items() if n > 0 and sizes.get(c, 0) > 0}
        if self.gpus and free_total:
            sets: list[tuple[int, list[str], int]] = []
            for classes, gpus in self.by_whole.items():
                room = sorted(c for c in classes if c in claimed)
                if room:
                    sets.append((len(room), room, gpus))
            for _, room, gpus in sorted(sets):
                _pour(claimed, whole_free, room, free_total * gpus / self.gpus)
        return {
            c: poisson_at_least(claimed[c] / sizes[c], whole_free[c] // sizes[c]) for c in claimed
        }


def poisson_at_least(mean: float, n: int) -> float:
    """P(X >= n) for X Poisson with this mean."""
    if n <= 0:
        return 1.0
    if mean <= 0:
        return 0.0
    # Beyond a dozen standard deviations a tail is below double precision's notice; the
    # terms are summed in logarithms, as e^-mean underflows past a mean of about 745.
    spread = 12 * math.sqrt(mean) + 12
    if n > mean + spread:
        return 0.0
    if n < mean - spread:
        return 1.0
    log_mean = math.log(mean)
    below = sum(
        math.exp(k * log_mean - mean - math.lgamma(k + 1))
        for k in range(max(0, int(mean - spread)), n)
    )
    return max(0.0, 1.0 - below)


def _pour(claimed: dict[K, float], free: Mapping[K, int], classes: list[K], amount: float) -> None:
    """Add `amount` GPUs of claims to the least claimed of `classes`, raising them together
    to one share of their free GPUs."""
    by_share = sorted(classes, key=lambda c: (claimed[c] / free[c], c))
    have = room = 0.0
    for i, c in enumerate(by_share):
        have += claimed[c]
        room += free[c]
        level = (have + amount) / room
        following = by_share[i + 1] if i + 1 < len(by_share) else None
        if following is None or level <= claimed[following] / free[following]:
            for raised in by_share[: i + 1]:
                claimed[raised] = level * free[raised]
            return


def tally(index: dict[H, int], key: H, gpus: int) -> None:
    """Add gpus to key's count, which leaves the index when it comes to zero."""
    total = index.get(key, 0) + gpus
    if total:
        index[key] = total
    else:
        index.pop(key, None)
