"""What the orders of the mix will claim of the cluster as it fills.

- **pressure** on a class (and on a pool, a class's nodes of one shape): the share of its
  free GPUs that orders restricted to some classes will claim, so placement can keep
  scarce classes for the orders that can use nothing else. An order is restricted by
  what it accepts and by what it needs: one that asks for 8 GPUs and 120 cores can only
  run on the classes with nodes that big (`Mix.set_shapes`). Beyond the known orders, a
  prior share of the orders to come needs each class alone, so a small class is priced
  before the orders that need it arrive.
- **whole-node risk** of a class: the chance that breaking one of its entirely free
  largest nodes turns away an order that needs such a node before the cluster is full.
  Free GPUs may be plenty while the whole nodes a big order needs are few: small orders
  break them one by one, and a model's last whole nodes go first where the orders that
  can use nothing else are few, as a small count of arrivals varies the most.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TypeVar

from gpu_binder.placement.mix import Mix, Pool

# What claims are poured into: classes or pools.
K = TypeVar("K", str, Pool)


def pressures(mix: Mix, capacity: Mapping[str, int], free: Mapping[str, int]) -> dict[str, float]:
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
    if mix.gpus and free_total:
        sets: list[tuple[int, list[str], int]] = []
        for classes, gpus in mix.by_effective.items():
            room = sorted(c for c in classes & present if free.get(c, 0) > 0)
            if room and not present <= classes:
                sets.append((len(room), room, gpus))
        for _, room, gpus in sorted(sets):
            pour(claimed, free, room, free_total * gpus / mix.gpus)
        split = prior_split(mix, present)
        for c in present:
            if free.get(c, 0) > 0:
                claimed[c] += free_total * mix.prior * split[c]
    return {c: claimed[c] / n if c in claimed and n > 0 else 0.0 for c, n in free.items()}


def pool_pressures(mix: Mix, free: Mapping[Pool, int]) -> dict[Pool, float]:
    """Per pool, the share of its free GPUs the restricted orders will claim: as
    `pressures` pours them into their classes, but into the pools of those classes
    that hold them, so a class's pool that most of its claims cannot use (1-GPU nodes
    for 8-GPU claims, 32 GiB nodes for 96 GiB ones) is priced by the claims it can
    take, and the pool they must go to by all of theirs. Restricted here means by
    pool (Mix.pools): an order every class holds claims the pools that hold it when
    some pool does not.

    The whole-node floor's assumed orders of a class's largest node size, beyond the
    known ones (see Mix.floor_share), claim the class's largest pools as well: otherwise
    a pool that only orders not yet seen will need looked the cheapest to the orders
    seen (sweep draws 4005 and 5019, docs/PLACEMENT.md).

    The prior's claim on a class (see pressures) is spread over its pools as its parts
    came (see prior_split): the pseudo-orders' by the pools' free GPUs, as they say
    nothing of the shape the orders to come need, and the known restricted orders'
    over the pools of the class that hold them. Not poured into the least claimed, so
    a pool only known claims fit stays dearer than one they do not (draw 4005); and a
    class's prior does not fall on a pool its known orders cannot use (draw 10015: the
    8-GPU orders only L4's 8-GPU nodes hold priced L4's 1-GPU nodes)."""
    free_total = sum(free.values())
    claimed = {p: 0.0 for p, n in free.items() if n > 0}
    if mix.gpus and free_total:
        sets: list[tuple[int, list[Pool], float]] = []
        for pools, gpus in mix.by_pools.items():
            room = [p for p in pools if p in claimed]
            if room:
                sets.append((len(room), room, gpus))
        for c, shapes in (mix.shapes or {}).items():
            size = max((g for g, _, _ in shapes), default=0)
            share = mix.floor_share(c, size)
            if not share:
                continue
            room = sorted((c, g, cpu, memory) for g, cpu, memory in shapes if g == size)
            room = [p for p in room if p in claimed]
            if room:
                # In GPUs ordered: the floor's share of the orders, each of `size`.
                sets.append((len(room), room, share * size * mix.orders))
        for _, room, ordered in sorted(sets):
            pour(claimed, free, room, free_total * ordered / mix.gpus)
        _spread_prior(mix, claimed, free, free_total)
    return {p: claimed[p] / free[p] for p in claimed}


def _spread_prior(
    mix: Mix, claimed: dict[Pool, float], free: Mapping[Pool, int], free_total: int
) -> None:
    """Add each class's prior claim to its pools (see pool_pressures)."""
    classes = mix.shapes or {}
    split = prior_split(mix, frozenset(classes))
    if not mix.prior or not any(split.values()):
        return
    pseudo = _pseudo_order(mix)
    known: dict[Pool, float] = {}
    for pools, gpus in mix.by_pools.items():
        held = {p[0] for p in pools}
        for c in held:
            _share(known, [p for p in pools if p[0] == c and p in claimed], free, gpus / len(held))
    for c, shapes in classes.items():
        room = [p for p in ((c, *shape) for shape in shapes) if p in claimed]
        parts: dict[Pool, float] = {p: known.get(p, 0.0) for p in room}
        _share(parts, room, free, pseudo)
        total = sum(parts.values())
        if total:
            for p in room:
                claimed[p] += free_total * mix.prior * split[c] * parts[p] / total


def _share(
    parts: dict[Pool, float], room: list[Pool], free: Mapping[Pool, int], amount: float
) -> None:
    """Add `amount` to the pools of `room` in proportion to their free GPUs."""
    room_free = sum(free[p] for p in room)
    for p in room:
        parts[p] = parts.get(p, 0.0) + amount * free[p] / room_free


def prior_split(mix: Mix, classes: frozenset[str]) -> dict[str, float]:
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
    parts = dict.fromkeys(classes, _pseudo_order(mix))
    for accepted, gpus in mix.by_effective.items():
        room = accepted & classes
        if room and not classes <= accepted:
            for c in room:
                parts[c] += gpus / len(room)
    total = sum(parts.values())
    return {c: part / total for c, part in parts.items()}


def _pseudo_order(mix: Mix) -> float:
    """The GPUs of one average known order: the weight of the prior's even guess per class."""
    return mix.gpus / mix.orders if mix.orders else 1.0


def whole_risks(
    mix: Mix, free: Mapping[str, int], whole_free: Mapping[str, int], sizes: Mapping[str, int]
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
    if mix.gpus and free_total:
        sets: list[tuple[int, list[str], int]] = []
        for classes, gpus in mix.by_whole.items():
            room = sorted(c for c in classes if c in claimed)
            if room:
                sets.append((len(room), room, gpus))
        for _, room, gpus in sorted(sets):
            pour(claimed, whole_free, room, free_total * gpus / mix.gpus)
    return {c: poisson_at_least(claimed[c] / sizes[c], whole_free[c] // sizes[c]) for c in claimed}


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


def pour(claimed: dict[K, float], free: Mapping[K, int], classes: list[K], amount: float) -> None:
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
