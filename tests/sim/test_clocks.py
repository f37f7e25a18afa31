"""The clocks of other machines: off the virtual clock by a fixed offset each, up to skew."""

from __future__ import annotations

from datetime import timedelta

from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.clocks import CONTROLLER, Clocks


def test_without_skew_every_machine_tells_the_virtual_time() -> None:
    clock = VirtualClock()
    clocks = Clocks(clock.now)
    assert clocks.now("n1") == clocks.now(CONTROLLER) == clock.now()


def test_a_machines_offset_is_whole_seconds_within_the_skew() -> None:
    clocks = Clocks(VirtualClock().now, skew=600, seed=1)
    offsets = [clocks.offset(f"n{i}") for i in range(50)]
    assert all(abs(o) <= timedelta(seconds=600) and o.microseconds == 0 for o in offsets)
    assert len(set(offsets)) > 1


def test_a_machines_clock_keeps_its_offset_as_time_passes() -> None:
    clock = VirtualClock()
    clocks = Clocks(clock.now, skew=600, seed=1)
    before = clocks.now("n1") - clock.now()
    clock.advance(3600)
    assert clocks.now("n1") - clock.now() == before


def test_a_stepped_clock_gets_a_new_offset() -> None:
    clocks = Clocks(VirtualClock().now, skew=600, seed=1)
    before = clocks.offset("n1")
    offsets = {clocks.step("n1") for _ in range(5)}
    assert offsets - {before}
