"""Choosing devices for an order: which node, which devices on it.

Policies are small scoring functions over the nodes that fit, like kube-scheduler's
Score plugins; topology picks the tightest domain on the chosen node.
"""

from gpu_binder.placement.choose import Candidate, Fit, Placement, choose, rank
from gpu_binder.placement.policy import POLICIES, Score, pack, spread
from gpu_binder.placement.topology import pick_devices

__all__ = [
    "POLICIES",
    "Candidate",
    "Fit",
    "Placement",
    "Score",
    "choose",
    "pack",
    "pick_devices",
    "rank",
    "spread",
]
