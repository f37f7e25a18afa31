"""Choosing the node for an order: filter the nodes that fit, score them, take the best.

Scores read counts only, so ranking a thousand nodes is cheap; devices are picked on
the winner, and on the next one only if the winner's topology cannot hold the order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_binder.api.types import GPUDevice
from gpu_binder.placement.policy import Score
from gpu_binder.placement.topology import pick_devices


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node that may take the order, with its free devices counted per class."""

    node: str
    free: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Fit:
    node: str
    # Free devices of the ordered classes left on the node after this order.
    leftover: int
    # Free devices of the ordered classes on the node before it.
    free: int


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    devices: tuple[GPUDevice, ...]


# The free devices of a class on a node, and its devices per topology domain.
FreeLoader = Callable[[str, str], Sequence[GPUDevice]]
DomainLoader = Callable[[str, str], Mapping[str, int] | None]


def fit(order: Mapping[str, int], c: Candidate) -> Fit | None:
    free = leftover = 0
    for class_name, count in order.items():
        have = c.free.get(class_name, 0)
        if have < count:
            return None
        free += have
        leftover += have - count
    return Fit(c.node, leftover, free)


def rank(order: Mapping[str, int], candidates: Iterable[Candidate], score: Score) -> list[Fit]:
    """Fitting nodes, best first; ties go to the lowest node name so runs repeat."""
    fits = [f for c in candidates if (f := fit(order, c)) is not None]
    fits.sort(key=lambda f: (-score(f), f.node))
    return fits


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


def choose(
    order: Mapping[str, int],
    candidates: Iterable[Candidate],
    score: Score,
    load_free: FreeLoader,
    topology: str = "Node",
    load_domains: DomainLoader | None = None,
) -> Placement | None:
    """The best-scoring node whose devices can hold the order, with those devices."""
    fits = [f for c in candidates if (f := fit(order, c)) is not None]
    if not fits:
        return None
    best = min(fits, key=lambda f: (-score(f), f.node))
    placed = pick(order, best.node, topology, load_free, load_domains)
    if placed is not None or topology == "Node":
        return placed
    # Only topology can refuse a node whose counts fit: try the rest in rank order.
    for f in sorted(fits, key=lambda f: (-score(f), f.node)):
        if f.node != best.node:
            placed = pick(order, f.node, topology, load_free, load_domains)
            if placed is not None:
                return placed
    return None
