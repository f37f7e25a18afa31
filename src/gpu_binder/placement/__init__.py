"""Choosing devices for an order: which class, which node, which devices on it.

Policies are small scoring functions over the nodes that fit (GPUs, CPU and memory),
like kube-scheduler's Score plugins (`policy`); the order mix the binder keeps tells a
policy what a free GPU is worth (`mix`) and what the restricted orders will claim of
each class (`claims`), counting the newest orders (`recent`); an order
may accept several classes (`options`); topology picks the tightest domain on the chosen
node (`topology`).
"""

from gpu_binder.placement.choose import (
    Candidate,
    Fit,
    Placement,
    Ranked,
    choose,
    first_placement,
    fit,
    hedged,
    main_class,
    rank,
    rank_key,
)
from gpu_binder.placement.claims import pool_pressures, pressures, whole_risks
from gpu_binder.placement.mix import UNLIMITED, Demand, Mix
from gpu_binder.placement.options import options, resolve
from gpu_binder.placement.policy import (
    LEAST_STRANDED,
    POLICIES,
    Outlook,
    Score,
    least_stranded,
    pack,
    spread,
)
from gpu_binder.placement.recent import RECENT_ORDERS, Recent
from gpu_binder.placement.topology import pick_devices

__all__ = [
    "LEAST_STRANDED",
    "POLICIES",
    "RECENT_ORDERS",
    "UNLIMITED",
    "Candidate",
    "Demand",
    "Fit",
    "Mix",
    "Outlook",
    "Placement",
    "Ranked",
    "Recent",
    "Score",
    "choose",
    "first_placement",
    "fit",
    "hedged",
    "least_stranded",
    "main_class",
    "options",
    "pack",
    "pick_devices",
    "pool_pressures",
    "pressures",
    "rank",
    "rank_key",
    "resolve",
    "spread",
    "whole_risks",
]
