"""Completing an order's set: on its node if it fits there, else whole on another node."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpu_binder.api.types import BindReason, GPUDevice, Phase
from gpu_binder.binder import ops
from gpu_binder.binder.context import Context
from gpu_binder.binder.steps.sets import set_node


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    devices: tuple[str, ...]
    message: str

    @property
    def ok(self) -> bool:
        return not self.message


def current_set(ctx: Context, key: str) -> list[GPUDevice]:
    """The usable part of a set: Lost devices are on their way out of it.

    Unless a live VMI (scheduled or not) holds the set: its Lost device stays until the VMI
    ends, as no rebind may happen meanwhile. Counting it as missing would bind a
    replacement and release the Lost device (or, while attached, the replacement) as
    beyond the order, on every pass, until the node has nothing free.
    """
    devs = ctx.world.devices.set_of(key)
    if ctx.world.live_vmis(key):
        return devs
    return [d for d in devs if d.status.phase != Phase.LOST]


def missing(order: Mapping[str, int], have: list[GPUDevice]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in have:
        counts[d.status.class_name] = counts.get(d.status.class_name, 0) + 1
    return {c: n - counts.get(c, 0) for c, n in order.items() if n > counts.get(c, 0)}


def complete(
    ctx: Context, key: str, order: Mapping[str, int], reason: BindReason, may_move: bool
) -> Outcome:
    have = current_set(ctx, key)
    need = missing(order, have)
    node = set_node(have) if have else ""
    if not need:
        return Outcome(node, tuple(sorted(d.metadata.name for d in have)), "")
    if have:
        placed = ops.place(ctx, need, only=node)
        if placed is not None:
            for d in placed.devices:
                ops.bind(ctx, d, key, reason, f"completes the set on {node}")
            names = [d.metadata.name for d in have] + [d.metadata.name for d in placed.devices]
            return Outcome(node, tuple(sorted(names)), "")
        if not may_move:
            return Outcome(
                "",
                (),
                f"{ops.describe(need)} more needed on {node}, where the VM "
                f"runs; {ops.shortfall(ctx, need)}",
            )
        placed = ops.place(ctx, order, exclude=node)
        if placed is None:
            return Outcome("", (), ops.shortfall(ctx, order))
        for d in placed.devices:
            ops.bind(
                ctx,
                d,
                key,
                reason,
                f"{node} cannot complete the set; the whole set moves to {placed.node}",
            )
        for d in have:
            ops.release(ctx, d, f"the set moved to {placed.node}")
        return Outcome(placed.node, tuple(sorted(d.metadata.name for d in placed.devices)), "")
    placed = ops.place(ctx, order)
    if placed is None:
        return Outcome("", (), ops.shortfall(ctx, order))
    policy = _policy(ctx, order)
    for d in placed.devices:
        ops.bind(ctx, d, key, reason, f"{ops.describe(order)} placed by policy {policy}")
    return Outcome(placed.node, tuple(sorted(d.metadata.name for d in placed.devices)), "")


def _policy(ctx: Context, order: Mapping[str, int]) -> str:
    first = max(order, key=lambda c: (order[c], c))
    cls = ctx.world.classes.get(first)
    return cls.spec.placement.policy if cls is not None else "Pack"
