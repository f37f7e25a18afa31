"""The binder's placement on a world no API server stands behind: the replay's binder.

The replay measures the binder's own decisions — completing an order's set, making room
by moving stopped VMs' sets, giving a set up — on a world it feeds itself. Their writes
are staged in that world (binder.plan) and never made: the world is all there is.
"""

from __future__ import annotations

from datetime import datetime

from gpu_binder.api.types import BindReason
from gpu_binder.binder import ops
from gpu_binder.binder.completion import complete
from gpu_binder.binder.config import Config
from gpu_binder.binder.context import Context, Memory
from gpu_binder.binder.plan import Plan
from gpu_binder.binder.steps.defrag import make_room
from gpu_binder.cache.world import World


class Placer:
    """One binder's decisions on `world` at the time `now`, with the memory of a binder
    that keeps running (its cache of each node's bound sets, used to make room)."""

    def __init__(self, world: World, config: Config, now: datetime) -> None:
        self.world = world
        self._ctx = Context(world, config, now, Memory(), Plan(world, now))

    def _fresh(self) -> Context:
        # The writes staged before are in the world already: a new plan starts empty.
        self._ctx.plan = Plan(self.world, self._ctx.now)
        return self._ctx

    def complete(self, key: str) -> bool:
        """Bind what the order of `key` lacks, as the orders step does; whether it holds
        its set now."""
        order = self.world.order_of(key)
        return complete(self._fresh(), key, order, BindReason.ORDER, may_move=True).ok

    def make_room(self, key: str) -> int:
        """Move stopped VMs' sets so the order of `key` fits, as the defragmentation step
        does; how many sets moved."""
        return make_room(self._fresh(), key)

    def release_set(self, key: str, why: str) -> int:
        """Give up every device bound to `key`; how many."""
        ctx = self._fresh()
        held = self.world.devices.set_of(key)
        for d in held:
            ops.release(ctx, d, why)
        return len(held)
