"""The orders the mix counts: the newest ones, so that the mix follows demand that changes.

Placement reads the known orders as a sample of the orders to come. Where demand drifts
(flexible 8-GPU orders first, restricted pairs later), every order ever placed is a
large, confident sample of the past: its margin (placement.choose) is small and its
prices point the wrong way. Counting only the newest `RECENT_ORDERS` orders by creation
time keeps the sample about the present, at a sampling error that stops falling there
(a share is known to ±1/(2√500) = ±2.2% at one standard error). Orders of the same
creation second keep the order the binder first saw them in.

The order they came in also says how much of what is to come may not have been seen
(`unseen_share`), and how likely the next orders are to need a class's largest node
(`whole_chance`), which the mix's whole-node floor assumes: orders come in runs of one
kind (a tenant creating twelve alike), and a run is one look at the mix, not twelve.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from datetime import UTC, datetime

from gpu_binder.placement.mix import Demand, Mix, tally

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
        # Each order's kind (its demands) by number, so that runs compare numbers: the
        # number, its demands and its orders, kept while it has any.
        self._kind_of: dict[str, int] = {}
        self._kind_numbers: dict[tuple[Demand, ...], int] = {}
        self._kinds: dict[int, tuple[tuple[Demand, ...], int]] = {}
        self._numbered = 0
        # The looks at the counted orders (runs of one kind, by age), in all and per kind,
        # kept as orders come and go (a recount per order cost a fifth of a pass), and the
        # chances read from them since the last change.
        self._looks = 0
        self._looks_of: dict[int, int] = {}
        self._chances: dict[tuple[str, int], float] = {}
        mix.whole_chance = self.whole_chance

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
            self._unnumber(key, known[1])
        if not demands:
            return
        if age is None:
            self._seen += 1
            age = (_aware(created), self._seen, key)
        self._orders[key] = (age, demands)
        self._number(key, demands)
        self._insert(age, demands)

    def _number(self, key: str, demands: tuple[Demand, ...]) -> None:
        """Give the order its kind's number, numbering a kind no order has."""
        number = self._kind_numbers.get(demands)
        if number is None:
            self._numbered += 1
            number = self._kind_numbers[demands] = self._numbered
            self._kinds[number] = (demands, 0)
        self._kind_of[key] = number
        self._kinds[number] = (demands, self._kinds[number][1] + 1)

    def _unnumber(self, key: str, demands: tuple[Demand, ...]) -> None:
        """Take the order's kind number back, forgetting a kind no order has any more."""
        number = self._kind_of.pop(key)
        users = self._kinds[number][1] - 1
        if users:
            self._kinds[number] = (demands, users)
        else:
            del self._kinds[number]
            del self._kind_numbers[demands]

    def unseen_share(self) -> float:
        """The share of the orders to come assumed to be of a kind not seen yet, by the
        rule of succession: a kind that showed in none of `looks` looks at the mix shows
        next with chance 1 / (looks + 2). A look is a run of orders of one kind in a row
        (by age), as a tenant creating twelve alike is one draw of the mix, not twelve:
        bursts of alike orders count as the few looks they are, shuffled orders as
        nearly one look each."""
        return 1.0 / (self._looks + 2)

    def whole_chance(self, class_name: str, whole: int) -> float:
        """The chance that the next look at the mix is of orders of `whole` GPUs of the
        class, by the rule of succession: (looks of such orders + 1) / (looks + 2). With
        none seen, the unseen share."""
        key = (class_name, whole)
        chance = self._chances.get(key)
        if chance is None:
            sized = sum(
                looks
                for number, looks in self._looks_of.items()
                if any(d.of_size(class_name, whole) for d in self._kinds[number][0])
            )
            chance = self._chances[key] = (sized + 1) / (self._looks + 2)
        return chance

    def _insert(self, age: _Age, demands: tuple[Demand, ...]) -> None:
        touched = self._touched(age)
        before = self._run_starts(touched)
        insort(self._ages, age)
        self._relook(before, self._run_starts(touched))
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
        self._relook(before, self._run_starts(touched))

    def _touched(self, age: _Age) -> frozenset[str]:
        """The orders whose starting a look may change as the order of this age comes or
        goes: it, its neighbours by age, and those at the window's oldest edge."""
        ages = self._ages
        at = bisect_left(ages, age)
        edge = len(ages) - self.size
        near = (at - 1, at, at + 1, edge - 1, edge, edge + 1, edge + 2)
        return frozenset([age[2], *(ages[i][2] for i in near if 0 <= i < len(ages))])

    def _run_starts(self, keys: frozenset[str]) -> list[int]:
        """The kinds of the counted orders among keys that start a run: the oldest
        counted, or one whose elder is of another kind."""
        ages, kind_of = self._ages, self._kind_of
        oldest = max(0, len(ages) - self.size)
        starts = []
        for key in keys:
            age = self._orders[key][0]
            at = bisect_left(ages, age)
            if at < oldest or at == len(ages) or ages[at] != age:
                continue
            kind = kind_of[key]
            if at == oldest or kind_of[ages[at - 1][2]] != kind:
                starts.append(kind)
        return starts

    def _relook(self, before: list[int], after: list[int]) -> None:
        """Count the looks again: those starting among the touched orders, before and
        after the change."""
        for kinds, n in ((before, -1), (after, 1)):
            for kind in kinds:
                self._looks += n
                tally(self._looks_of, kind, n)
        self._chances.clear()

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
