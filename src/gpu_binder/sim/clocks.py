"""The clocks of other machines: every node's, and virt-controller's, off the true time.

Times the binder reads were written by other machines — a VMI's phase transition
timestamps by virt-controller (Pending, Scheduling, Scheduled) and by virt-handler on the
VMI's node (Running, Succeeded, Failed: `pkg/controller/controller.go`,
`SetVMIPhaseTransitionTimestamp`, called with each one's `time.Now()`), a GPU's
`lastReset` by its node's agent — each by its own clock, which NTP keeps near the true
time but not on it. Each machine's clock here is the virtual clock plus an offset drawn
once (whole seconds, up to `skew` either way); `step` draws a node's offset again, as when
NTP steps a clock that drifted. The binder's own clock is the virtual clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

# The key of virt-controller's clock (it runs on some control-plane node).
CONTROLLER = ""


class Clocks:
    def __init__(self, clock: Callable[[], datetime], skew: float = 0.0, seed: int = 0) -> None:
        self.clock = clock
        self.skew = skew
        self._rng = random.Random(seed)
        self._offsets: dict[str, timedelta] = {}

    def offset(self, machine: str) -> timedelta:
        found = self._offsets.get(machine)
        if found is None:
            found = self._offsets[machine] = self._draw()
        return found

    def now(self, machine: str = CONTROLLER) -> datetime:
        """What the machine's clock says now (CONTROLLER: virt-controller's)."""
        if not self.skew:
            return self.clock()
        return self.clock() + self.offset(machine)

    def on(self, machine: str) -> Callable[[], datetime]:
        """The machine's clock as a function, for parts that take a clock."""
        return lambda: self.now(machine)

    def step(self, machine: str) -> timedelta:
        """The machine's clock is set again (an NTP step): a new offset."""
        self._offsets[machine] = self._draw()
        return self._offsets[machine]

    def _draw(self) -> timedelta:
        if not self.skew:
            return timedelta(0)
        return timedelta(seconds=round(self._rng.uniform(-self.skew, self.skew)))
