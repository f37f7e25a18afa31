"""Completing an order's set: on its node if it fits there, else whole on another node.

Not a step: the orders, requests and defragmentation steps complete sets by it, and the
replay places its orders by it (binder.Placer).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_binder.api.types import BindReason
from gpu_binder.binder import ops, placing, quota
from gpu_binder.binder.context import Context
from gpu_binder.binder.kubevirtcr import served_twice
from gpu_binder.binder.queries import current_set, held, missing
from gpu_binder.binder.quota import Exceeded
from gpu_binder.cache.deviceindex import set_node
from gpu_binder.placement import main_class, resolve


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    devices: tuple[str, ...]
    message: str
    # Set when the namespace's quota refused the bind (the message says so).
    quota: Exceeded | None = None

    @property
    def ok(self) -> bool:
        return not self.message


def _over(exceeded: Exceeded) -> Outcome:
    return Outcome("", (), exceeded.message, exceeded)


def complete(
    ctx: Context,
    key: str,
    order: Mapping[str, int],
    reason: BindReason,
    may_move: bool,
    alternatives: Sequence[str] | None = None,
) -> Outcome:
    """Bind what the order's set lacks, on the set's node or whole elsewhere.

    `alternatives` are classes that may serve the order instead (a bind request says
    which); None reads them from the order's VM. A set that holds devices of one of them
    is completed in that class.
    """
    if alternatives is None:
        alternatives = ctx.world.alternatives_of(key)
    have = current_set(ctx.world, key)
    if alternatives:
        order = resolve(order, alternatives, held(have))
    need = missing(order, have)
    node = set_node(have) if have else ""
    if not need:
        return Outcome(node, tuple(sorted(d.metadata.name for d in have)), "")
    twice = served_twice(ctx.world, ctx.config)
    refused = sorted(c for c in need if c in twice)
    if refused:
        return Outcome("", (), f"class {refused[0]} is not served: {twice[refused[0]]}")
    # The namespace's quota, before any search for room: its Lost devices, which leave
    # the set once it is complete, count as gone.
    namespace = key.partition("/")[0]
    usable = {d.metadata.name for d in have}
    leaving = held([d for d in ctx.world.devices.set_of(key) if d.metadata.name not in usable])
    if have or not alternatives:
        over = quota.admits(ctx.world, namespace, need, leaving)
        if over is not None:
            return _over(over)
    else:
        steered = quota.steer(ctx.world, namespace, order, alternatives, leaving)
        if isinstance(steered, Exceeded):
            return _over(steered)
        order, alternatives = steered
    if have:
        placed = placing.place(ctx, need, only=node, key=key)
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
                f"runs; {placing.shortfall(ctx, need, key)}",
            )
        placed = placing.place(ctx, order, exclude=node, key=key, alternatives=alternatives)
        if placed is None:
            return Outcome("", (), placing.shortfall(ctx, order, key))
        # Moved whole, it may take another class it accepts: held to that class's quota.
        gone = held(ctx.world.devices.set_of(key))
        over = quota.admits(ctx.world, namespace, held(list(placed.devices)), gone)
        if over is not None:
            return _over(over)
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
    placed = placing.place(ctx, order, key=key, alternatives=alternatives)
    if placed is None:
        return Outcome("", (), placing.shortfall(ctx, order, key))
    taken = held(list(placed.devices))
    why = f"{ops.describe(taken)} placed by policy {placing.class_policy(ctx, main_class(order))}"
    if taken.keys() != order.keys():
        why += f" (the VM accepts any of {', '.join(sorted(alternatives))})"
    for d in placed.devices:
        ops.bind(ctx, d, key, reason, why)
    return Outcome(placed.node, tuple(sorted(d.metadata.name for d in placed.devices)), "")
