"""The orders the mix counts: the newest ones, so that the mix follows demand that changes.

Placement reads the known orders as a sample of the orders to come. Where demand drifts
(flexible 8-GPU orders first, restricted pairs later), every order ever placed is a
large, confident sample of the past: its margin (placement.choose) is small and its
prices point the wrong way. Counting only the newest `RECENT_ORDERS` orders by creation
time keeps the sample about the present, at a sampling error that stops falling there
(a share is known to ±1/(2√500) = ±2.2% at one standard error). Orders of the same
creation second keep the order the binder first saw them in.

The order they came in also says how much of what is to come may not have been seen
(`unseen_share`), which the mix's whole-node floor assumes: orders come in runs of one
kind (a tenant creating twelve alike), and a run is one look at the mix, not twelve.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from datetime import UTC, datetime

from gpu_binder.placement.mix import Demand, Mix

# How many of the newest orders the mix counts (sweep draw 6000, docs/PLACEMENT.md).
RECENT_ORDERS = 500
# An order whose creation time is not known sorts as the oldest of its peers.
_UNKNOWN = datetime.min.replace(tzinfo=UTC)

# (creation time, the order the binder first saw it in, key): oldest first.
_Age = tuple[datetime, int, str]


class Recent:
    """Every order's demands, the newest `size` of them counted in `mix`."""

    def __init__(self, mix: Mix, size: int = RECENT_ORDERS) -> None:
        if size <= 0:
            raise ValueError(f"the mix must count at least one order, not {size}")
        self.mix = mix
        self.size = size
        self._ages: list[_Age] = []
        self._orders: dict[str, tuple[_Age, tuple[Demand, ...]]] = {}
        self._seen = 0
        # The looks at the counted orders (runs of one kind, by age), kept as orders come
        # and go: the floor asks at every placement, and a recount per order cost a fifth
        # of a pass.
        self._looks = 0
        mix.unseen_share = self.unseen_share

    def __contains__(self, key: str) -> bool:
        return key in self._orders

    def keys(self) -> set[str]:
        return set(self._orders)

    def set(self, key: str, created: datetime | None, demands: tuple[Demand, ...]) -> None:
        """The order under key asks for demands now (none: it is no order any more)."""
        known = self._orders.get(key)
        if known is not None and known[1] == demands:
            return
        age: _Age | None = known[0] if known is not None else None
        if known is not None:
            self._remove(known[0], known[1])
            del self._orders[key]
        if not demands:
            return
        if age is None:
            self._seen += 1
            age = (_aware(created), self._seen, key)
        self._orders[key] = (age, demands)
        self._insert(age, demands)

    def unseen_share(self) -> float:
        """The share of the orders to come assumed to be of a kind not seen yet, by the
        rule of succession: a kind that showed in none of `looks` looks at the mix shows
        next with chance 1 / (looks + 2). A look is a run of orders of one kind in a row
        (by age), as a tenant creating twelve alike is one draw of the mix, not twelve:
        bursts of alike orders count as the few looks they are, shuffled orders as
        nearly one look each."""
        return 1.0 / (self._looks + 2)

    def _insert(self, age: _Age, demands: tuple[Demand, ...]) -> None:
        touched = self._touched(age)
        before = self._run_starts(touched)
        insort(self._ages, age)
        self._looks += self._run_starts(touched) - before
        n = len(self._ages)
        if bisect_left(self._ages, age) < n - self.size:
            return
        self._count(demands, 1)
        if n > self.size:
            # The oldest counted order makes room.
            self._count(self._demands_at(n - self.size - 1), -1)

    def _remove(self, age: _Age, demands: tuple[Demand, ...]) -> None:
        touched = self._touched(age)
        before = self._run_starts(touched)
        n = len(self._ages)
        at = bisect_left(self._ages, age)
        if at >= n - self.size:
            self._count(demands, -1)
            if n > self.size:
                # The newest order not counted takes its place.
                self._count(self._demands_at(n - self.size - 1), 1)
        del self._ages[at]
        self._looks += self._run_starts(touched) - before

    def _touched(self, age: _Age) -> frozenset[str]:
        """The orders whose starting a look may change as the order of this age comes or
        goes: it, its neighbours by age, and those at the window's oldest edge."""
        ages = self._ages
        at = bisect_left(ages, age)
        edge = len(ages) - self.size
        near = (at - 1, at, at + 1, edge - 1, edge, edge + 1, edge + 2)
        return frozenset([age[2], *(ages[i][2] for i in near if 0 <= i < len(ages))])

    def _run_starts(self, keys: frozenset[str]) -> int:
        """How many of the counted orders among keys start a run: the oldest counted, or
        one whose elder is of another kind."""
        ages, orders = self._ages, self._orders
        oldest = max(0, len(ages) - self.size)
        starts = 0
        for key in keys:
            age, kind = orders[key]
            at = bisect_left(ages, age)
            if at < oldest or at == len(ages) or ages[at] != age:
                continue
            if at == oldest or orders[ages[at - 1][2]][1] != kind:
                starts += 1
        return starts

    def _demands_at(self, index: int) -> tuple[Demand, ...]:
        return self._orders[self._ages[index][2]][1]

    def _count(self, demands: tuple[Demand, ...], n: int) -> None:
        for d in demands:
            self.mix.add(d, n)


def _aware(created: datetime | None) -> datetime:
    """Creation times compare in UTC; one without a zone is read as UTC."""
    if created is None:
        return _UNKNOWN
    return created if created.tzinfo is not None else created.replace(tzinfo=UTC)
