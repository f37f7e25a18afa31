"""Order mixes the mix and claims tests build on."""

from __future__ import annotations

from gpu_binder.placement.mix import Demand, Mix

A, B = frozenset({"a"}), frozenset({"b"})
AB = A | B

# Two classes of 8-GPU nodes: a's hold 120-core orders, b's do not.
SHAPES = {"a": frozenset({(8, 128_000, 0)}), "b": frozenset({(8, 96_000, 0)})}
BIG_A = Demand(8, 120_000, 0, AB)  # only a's nodes are big enough
BIG_AB = Demand(8, 88_000, 0, AB)
SMALL = Demand(1, 1_000, 0, AB)


def mix_of(*demands: Demand, floor: float = 0.0, prior: float = 0.0) -> Mix:
    """A mix of these orders, with no whole-node floor or prior unless asked for."""
    m = Mix(whole_node_floor=floor, class_prior=prior)
    for d in demands:
        m.add(d)
    return m


def shaped(*demands: Demand) -> Mix:
    """A mix of these orders that knows the SHAPES of classes a and b."""
    m = mix_of(*demands)
    m.set_shapes(SHAPES)
    return m
