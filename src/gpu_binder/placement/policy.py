"""Placement policies: a score per fitting node; the highest score wins."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_binder.placement.choose import Fit

Score = Callable[["Fit"], float]


def pack(fit: Fit) -> float:
    """The fullest node that fits, so whole nodes stay free for whole-node orders."""
    return -float(fit.leftover)


def spread(fit: Fit) -> float:
    """The emptiest node, so one node's failure touches the fewest VMs."""
    return float(fit.leftover)


POLICIES: dict[str, Score] = {"Pack": pack, "Spread": spread}
