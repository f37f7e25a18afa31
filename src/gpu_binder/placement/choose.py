"""Choosing the node for an order: filter the nodes that fit, score them, take the best.

A node fits when it has the order's GPUs free *and* the CPU and memory the VM asks for,
so a binding never strands a VM the scheduler cannot start there. Scores read counts
only, so ranking a thousand nodes is cheap (and nodes in one free state are scored once,
see binder.ops); devices are picked on the winner, and on the next one only if the
winner's topology cannot hold the order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpu_binder.api.types import GPUDevice
from gpu_binder.placement.mix import UNLIMITED
from gpu_binder.placement.policy import Outlook, Score
from gpu_binder.placement.topology import pick_devices


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node that may take the order: its free devices per class, CPU and memory."""

    node: str
    free: Mapping[str, int]
    cpu_free: int = UNLIMITED
    memory_free: int = UNLIMITED


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
    return Fit(c.node, leftover, free, main_class(order), c.cpu_free, c.memory_free, cpu, memory)


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
