"""Choosing the node for an order: filter the nodes that fit, score them, take the best.

A node fits when it has the order's GPUs free *and* the CPU and memory the VM asks for,
so a binding never strands a VM the scheduler cannot start there. Scores read counts
only, so ranking a thousand nodes is cheap (and nodes in one free state are scored once,
see binder.ops); devices are picked on the winner, and on the next one only if the
winner's topology cannot hold the order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_binder.api.types import GPUDevice
from gpu_binder.placement.mix import UNLIMITED
from gpu_binder.placement.policy import STRANDED_WEIGHT, Outlook, Score
from gpu_binder.placement.topology import pick_devices


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node that may take the order: its free devices per class, CPU and memory."""

    node: str
    free: Mapping[str, int]
    cpu_free: int = UNLIMITED
    memory_free: int = UNLIMITED
    # The node's shape for the order's main class (its devices, CPU, memory), if known.
    shape: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class Fit:
    node: str
    # Free devices of the ordered classes left on the node after this order.
    leftover: int
    # Free devices of the ordered classes on the node before it.
    free: int
    # The class the order takes most GPUs of: the one its score reads.
    class_name: str = ""
    # The node's free CPU (millicores) and memory (bytes) before the order, and what the
    # order takes of them.
    cpu_free: int = UNLIMITED
    memory_free: int = UNLIMITED
    cpu: int = 0
    memory: int = 0
    # The node's shape for class_name: its devices of the class, CPU, memory (its pool).
    shape: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    devices: tuple[GPUDevice, ...]


# The free devices of a class on a node, and its devices per topology domain.
FreeLoader = Callable[[str, str], Sequence[GPUDevice]]
DomainLoader = Callable[[str, str], Mapping[str, int] | None]
# A fitting node and the concrete order (devices per class) it would take.
Ranked = tuple[Fit, Mapping[str, int]]

EMPTY_OUTLOOK = Outlook()


def main_class(order: Mapping[str, int]) -> str:
    """The class an order takes most GPUs of (then the last name): its policy decides."""
    return max(order, key=lambda c: (order[c], c))


def fit(order: Mapping[str, int], c: Candidate, cpu: int = 0, memory: int = 0) -> Fit | None:
    if cpu > c.cpu_free or memory > c.memory_free:
        return None
    free = leftover = 0
    for class_name, count in order.items():
        have = c.free.get(class_name, 0)
        if have < count:
            return None
        free += have
        leftover += have - count
    return Fit(
        c.node, leftover, free, main_class(order), c.cpu_free, c.memory_free, cpu, memory, c.shape
    )


def rank_key(f: Fit, score: Score, outlook: Outlook) -> tuple[float, int, str]:
    """Best first: the highest score, then the fullest node, then the first name."""
    return (-score(f, outlook), f.leftover, f.node)


def rank(
    order: Mapping[str, int],
    candidates: Iterable[Candidate],
    score: Score,
    outlook: Outlook = EMPTY_OUTLOOK,
    cpu: int = 0,
    memory: int = 0,
) -> list[Fit]:
    """Fitting nodes, best first; ties go to the fullest, then the lowest name, so runs repeat."""
    fits = [f for c in candidates if (f := fit(order, c, cpu, memory)) is not None]
    fits.sort(key=lambda f: rank_key(f, score, outlook))
    return fits


def margin(best: Fit, outlook: Outlook) -> float:
    """How far apart two scores must be for the known orders to tell them apart: one
    standard error of a mean over the mix's orders of a cost in the score's range.

    Every term of LeastStranded is a mean over the orders the binder knows, as a sample
    of the orders to come: a share of them restricted to a class (at most the GPUs taken)
    and the GPUs of the node they would strand (at most its size, at STRANDED_WEIGHT). A
    mean of n costs in a range R is off by up to R / (2 √n) at one standard error.
    """
    n = len(outlook.mix)
    if n <= 0:
        return math.inf
    size = max((w for w in outlook.whole.values()), default=best.free)
    span = (best.free - best.leftover) + STRANDED_WEIGHT * max(size, best.free)
    return span / (2.0 * math.sqrt(n))


def breaks_whole(f: Fit, outlook: Outlook) -> bool:
    """Does the order split a node of its class's largest size with every GPU free?

    An order that takes every GPU of such a node fills it rather than splits it: nothing
    is left there for a later order to be stranded on (a 1-GPU order on a class of 1-GPU
    nodes, an 8-GPU order on an 8-GPU node).
    """
    whole = outlook.whole.get(f.class_name, 0)
    return f.leftover > 0 and whole > 0 and f.free >= whole


def hedged(entries: Iterable[Ranked], score: Score, outlook: Outlook) -> list[Ranked]:
    """Best first, as rank_key orders them — except among the entries whose scores the mix
    cannot tell from the best (within `margin`): those go in first-fit order (by name, the
    node order), except that the nodes where the order would waste a gap a known order
    needed go last (`wastes_gap`); where the first would break a whole node, those that
    keep it whole go first (`keeps_whole_instead`); and a node of the first one's class
    that the order fills exactly goes before it when a known order needs the first one's
    free GPUs whole (`gap_needed`).

    Scores read the known orders as if they were the orders to come. While those are few,
    a class's price or a node's stranding differs from another's by the sampling noise of
    a handful of orders, and following it drains whichever class the sample happens to
    need least — the whole nodes that a rare order only it holds comes for later. First
    fit favours no class (the node order is arbitrary), so where the mix knows no better
    the binder does as first fit does, with three bets of its own that the mix's noise is
    not needed to justify; its confidence grows with every order it sees, up to the
    newest orders the mix counts (placement.recent). The first wastes no gap: GPUs left
    that no known order can use are lost for certain, a whole node broken only maybe, so
    it outranks the second. The second keeps whole nodes whole, with a
    node of its own class or of a pool no known order needs in its place: a small node
    of another class is the home of the orders restricted to that class, and a flexible
    order that fills it to keep a big node whole leaves them nowhere to go (sweep draw
    5019, docs/PLACEMENT.md). The third fills a node exactly, within one class: of two
    nodes of the same GPUs, the one with just the order's GPUs free is left with nothing
    to strand, and the other keeps its larger gap for the larger orders known to fit it,
    where first fit's order would cut that gap and leave both small. Where no known
    order needs the gap, cutting it costs nothing the mix can name, so the node order
    decides; so it does between classes, where filling a node draws on a pool other
    orders may need more (docs/PLACEMENT.md, *Kept: filling a node exactly*): which pool
    to draw is the price's question.
    """
    keyed = sorted(((rank_key(f, score, outlook), (f, o)) for f, o in entries), key=_first)
    if not keyed:
        return []
    top = keyed[0][0][0]
    cut = margin(keyed[0][1][0], outlook)
    near = [e for key, e in keyed if key[0] <= top + cut]
    near.sort(key=lambda e: e[0].node)
    # Stable: the nodes where the order wastes no gap a known order needed go first.
    wasted = {f: wastes_gap(f, outlook) for f, _ in near}
    near.sort(key=lambda e: wasted[e[0]])
    lead = near[0][0]
    if breaks_whole(lead, outlook):
        # Stable: of those, the nodes that keep it whole go first, each in node order.
        near.sort(key=lambda e: (wasted[e[0]], not keeps_whole_instead(e[0], lead, outlook)))
        lead = near[0][0]
    if gap_needed(lead, outlook):
        # Stable: the nodes the order fills keep their node order, and so does the rest.
        near.sort(key=lambda e: not (e[0].leftover == 0 and e[0].class_name == lead.class_name))
    return near + [e for key, e in keyed[len(near) :]]


def wastes_gap(f: Fit, outlook: Outlook) -> bool:
    """Does the order leave free GPUs on the node that no known order can use (too few, or
    without the CPU or memory any asks for), where a known order could have used the
    node's free GPUs whole (`gap_needed`)? Those GPUs are lost as surely as the order is
    placed, whatever the mix's sampling error; a whole node broken elsewhere is lost only
    if an order that needs it comes (sweep draw 2006, docs/PLACEMENT.md). Where no known
    order could have used more of the node, the order takes what the node was good for
    (a 1-GPU order on a 2-GPU node with memory for one), and nothing is wasted."""
    mix = outlook.mix
    if f.leftover <= 0 or not mix.orders:
        return False
    left = mix.fitting(f.class_name, f.leftover, f.cpu_free - f.cpu, f.memory_free - f.memory)
    return left == 0 and gap_needed(f, outlook)


def keeps_whole_instead(f: Fit, lead: Fit, outlook: Outlook) -> bool:
    """May the order go to f rather than break the whole node `lead`? Only where f breaks
    no whole node, and draws on the lead's own class or on GPUs no known order needs in
    place of it (Mix.needs_instead, for f's pool): a node of another class that a known
    order can use and the lead's class cannot is that order's, and which pool to draw on
    is the price's question, not the fallback's. Its pool, not its class: the orders
    only another class's big nodes hold do not need that class's small ones."""
    if breaks_whole(f, outlook):
        return False
    c = f.class_name
    return c == lead.class_name or not outlook.mix.needs_instead(c, lead.class_name, f.shape)


def gap_needed(f: Fit, outlook: Outlook) -> bool:
    """Does a known order need the node's free GPUs whole: one that fits them, with the
    node's CPU and memory, but asks more GPUs than this order takes?"""
    mix, taken = outlook.mix, f.free - f.leftover
    needing = mix.fitting(f.class_name, f.free, f.cpu_free, f.memory_free)
    return needing > mix.fitting(f.class_name, taken, f.cpu_free, f.memory_free)


def _first(item: tuple[tuple[float, int, str], Ranked]) -> tuple[float, int, str]:
    return item[0]


def pick(
    order: Mapping[str, int],
    node: str,
    topology: str,
    load_free: FreeLoader,
    load_domains: DomainLoader | None = None,
) -> Placement | None:
    chosen: list[GPUDevice] = []
    for class_name, count in order.items():
        sizes = load_domains(class_name, node) if load_domains and topology != "Node" else None
        picked = pick_devices(load_free(class_name, node), count, topology, sizes)
        if picked is None:
            return None
        chosen.extend(picked)
    return Placement(node, tuple(chosen))


def first_placement(
    ranked: Iterable[Ranked],
    topology_of: Callable[[str], str],
    load_free: FreeLoader,
    load_domains: DomainLoader | None = None,
) -> Placement | None:
    """The first ranked node whose devices can hold its order (only topology refuses one)."""
    for f, order in ranked:
        placed = pick(order, f.node, topology_of(f.class_name), load_free, load_domains)
        if placed is not None:
            return placed
    return None


def choose(
    order: Mapping[str, int],
    candidates: Iterable[Candidate],
    score: Score,
    load_free: FreeLoader,
    topology: str = "Node",
    load_domains: DomainLoader | None = None,
    *,
    outlook: Outlook = EMPTY_OUTLOOK,
    cpu: int = 0,
    memory: int = 0,
) -> Placement | None:
    """The best-scoring node whose devices can hold the order, with those devices."""
    fits = rank(order, candidates, score, outlook, cpu, memory)
    return first_placement(((f, order) for f in fits), lambda _c: topology, load_free, load_domains)
