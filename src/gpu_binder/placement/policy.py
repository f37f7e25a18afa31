"""Placement policies: a score per fitting node; the highest score wins.

Like kube-scheduler's Score plugins, a policy reads one node's fit (what the node has
free, what the order takes) and an outlook on the cluster (the order mix, how scarce each
class is); ties go to the fullest node, then the first name (see choose.rank).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpu_binder.placement.mix import UNLIMITED, Mix, Pool

if TYPE_CHECKING:
    from gpu_binder.placement.choose import Fit

# How much one GPU stranded in expectation counts against taking a GPU of a class that
# restricted orders will claim whole (pressure 1). Class scarcity must dominate, yet not
# blindly — an order's fragmentation on a scarce-but-roomy class can beat a
# plentiful-but-cramped one. Known mixes (arrival mode) score alike from 0.1 to 0.3;
# online the weight also sets how many orders the hedge needs before a stranding lead
# outgrows the claim term's share of its margin: at 0.1 a GPU left with no core for any
# known order waited ~700 orders for the score to see it (docs/PLACEMENT.md, *The
# stranding weight, measured online*).
STRANDED_WEIGHT = 0.3


@dataclass(frozen=True, slots=True)
class Outlook:
    """What a policy may know of the cluster beyond the node it scores."""

    mix: Mix = field(default_factory=Mix)
    # Per class: the share of its free GPUs restricted orders will claim (claims.pressures).
    pressure: Mapping[str, float] = field(default_factory=dict)
    # Per class: its largest node size, which the mix's whole-node floor keeps whole.
    whole: Mapping[str, int] = field(default_factory=dict)
    # Per class: how much likelier breaking one of its whole nodes is to turn away an order
    # that needs one than breaking one of the safest class the order may take
    # (claims.whole_risks, see binder.placing.outlook).
    whole_risk: Mapping[str, float] = field(default_factory=dict)
    # Per pool (a class's nodes of one shape): the share of its free GPUs the restricted
    # orders that fit its nodes will claim (claims.pool_pressures).
    pool_pressure: Mapping[Pool, float] = field(default_factory=dict)


Score = Callable[["Fit", Outlook], float]


def pack(fit: Fit, outlook: Outlook) -> float:
    """The fullest node that fits, so whole nodes stay free for whole-node orders."""
    return -float(fit.leftover)


def spread(fit: Fit, outlook: Outlook) -> float:
    """The emptiest node, so one node's failure touches the fewest VMs."""
    return float(fit.leftover)


def stranding(fit: Fit, outlook: Outlook) -> float:
    """How many more free GPUs of the node an order of the mix that could use it would
    leave unusable after this one (see Mix.fragmentation).

    An order that cannot use the node's free state at all reads every free GPU as
    stranded before and only the leftover after; counted, it would credit the placement
    with the GPUs taken, and nodes most orders cannot use would look cheapest to fill —
    exactly the nodes the few orders that can use them need. So the GPUs taken are
    charged back at the share of the mix the node could not take.
    """
    mix = outlook.mix
    whole = outlook.whole.get(fit.class_name, 0)
    floor = mix.floor_share(fit.class_name, whole)
    state = (fit.class_name, fit.free, fit.cpu_free, fit.memory_free, whole, floor)
    before = mix.fragmentation(*state)
    charged_back = (fit.free - fit.leftover) * mix.unfit_share(*state)
    after = mix.fragmentation(
        fit.class_name,
        fit.leftover,
        fit.cpu_free - fit.cpu,
        fit.memory_free - fit.memory,
        whole,
        floor,
    )
    return after - before + charged_back


def least_stranded(fit: Fit, outlook: Outlook) -> float:
    """The node, and class, where the order strands the fewest GPUs.

    Costs in GPUs: the GPUs taken from a class in proportion to how much of it
    restricted orders will claim (none for a class nobody needs; on a node whose free
    GPUs, CPU and memory could take none of those orders, the GPUs it strands there
    instead, see claim_cost) — and, when the order breaks a whole node, the node's GPUs
    times its class's excess whole-node risk — and the GPUs of the node that become
    unusable for the orders of the mix that could use it (nothing when no other order
    could: filling such a gap costs nothing, and it is breaking a node elsewhere that
    costs) — and the GPUs it leaves without the node's share of its CPU or memory, priced
    as GPUs taken (see starves). A whole node stays whole while a partly used node can
    take the order.
    """
    taken = fit.free - fit.leftover
    stranded = stranding(fit, outlook)
    scarcity = claim_cost(fit, outlook, taken, stranded)
    whole = outlook.whole.get(fit.class_name, 0)
    if taken and whole and fit.free >= whole:
        # Breaking a whole node risks all of it for the orders that need one.
        scarcity += whole * outlook.whole_risk.get(fit.class_name, 0.0)
    starved = starves(fit)
    if starved:
        # Lost to the orders the node was built for as surely as GPUs taken.
        scarcity += starved * max(STRANDED_WEIGHT, pool_price(fit, outlook))
    return -(scarcity + STRANDED_WEIGHT * stranded)


def starves(fit: Fit) -> float:
    """How many of the node's GPUs the order leaves without their share of its CPU or
    memory (the node's over its GPUs), beyond those it found so.

    The mix prices stranding by the orders known, and while the known ones could not use
    a node's GPUs together either, a GPU left without cores looks stranded already: early
    online, singles of 24 cores went to 2-GPU nodes of 32 and left the other GPU 8, where
    4-GPU nodes of 128 would have fed it — and the 16-core orders that came later found
    those GPUs dead (sweep draw 2006, docs/PLACEMENT.md). A node's shape says what orders
    its owner bought it for before any is seen.
    """
    if fit.shape is None or fit.leftover <= 0:
        return 0.0
    after = _unfed(fit.shape, fit.leftover, fit.cpu_free - fit.cpu, fit.memory_free - fit.memory)
    return max(0.0, after - _unfed(fit.shape, fit.free, fit.cpu_free, fit.memory_free))


def _unfed(shape: tuple[int, int, int], gpus: int, cpu_milli: int, memory_bytes: int) -> float:
    """Of gpus free GPUs, how many the free CPU and memory leave without the node's share
    (in part: half a share feeds half a GPU, for orders below the share)."""
    node_gpus, node_cpu, node_memory = shape
    fed = float(gpus)
    for free, total in ((cpu_milli, node_cpu), (memory_bytes, node_memory)):
        if 0 < total < UNLIMITED:
            fed = min(fed, free * node_gpus / total)
    return gpus - max(0.0, fed)


def pool_price(fit: Fit, outlook: Outlook) -> float:
    """The price of one of the node's GPUs: its pool's pressure, or its class's."""
    pressure = outlook.pressure.get(fit.class_name, 0.0)
    if fit.shape is None:
        return pressure
    return outlook.pool_pressure.get((fit.class_name, *fit.shape), pressure)


def claim_cost(fit: Fit, outlook: Outlook, taken: int, stranded: float) -> float:
    """What the order costs the restricted orders that claim its class, in GPUs.

    Where a claiming order could go, the GPUs it takes at its pool's pressure: the claims
    the node's shape can hold, not those only another shape of the class holds. Where
    none could (too few GPUs, cores or memory left for them), taking GPUs costs them
    nothing — but GPUs the order strands there are lost to the orders that could have
    used them, which then take as many elsewhere from the classes the claims share:
    those pay the pressure. Free of it, the nodes poorest in cores or memory per GPU
    were the cheapest place for every order, and the CPU-hungry ones left their GPUs
    without a core (default trace online, docs/PLACEMENT.md).

    An entirely free node pays its pool's pressure whether or not a known claim fits it:
    the pool's price holds the prior's claims of orders not seen yet, which may need a
    whole node, and free of it the pools no known claim fits were drained first (sweep
    draw 1, docs/PLACEMENT.md). A class that no restricted order claims may still have
    pools that orders of every class claim (see Mix.pools).
    """
    pressure = outlook.pressure.get(fit.class_name, 0.0)
    if not pressure and not outlook.pool_pressure:
        return 0.0
    if _entirely_free(fit) or outlook.mix.serves_claims(
        fit.class_name, fit.free, fit.cpu_free, fit.memory_free
    ):
        return taken * pool_price(fit, outlook)
    return max(0.0, stranded) * pressure


def _entirely_free(fit: Fit) -> bool:
    """Has the node every GPU, core and byte of its pool free?"""
    if fit.shape is None:
        return False
    gpus, cpu, memory = fit.shape
    return fit.free >= gpus and fit.cpu_free >= cpu and fit.memory_free >= memory


LEAST_STRANDED = "LeastStranded"
POLICIES: dict[str, Score] = {LEAST_STRANDED: least_stranded, "Pack": pack, "Spread": spread}
