"""The virtual clock moves only forward, and only when told."""

from __future__ import annotations

import pytest

from gpu_binder.sim.clock import EPOCH, VirtualClock


def test_the_clock_stands_still_until_advanced() -> None:
    clock = VirtualClock()
    assert clock.now() == clock() == EPOCH


def test_advance_moves_time_forward_by_seconds() -> None:
    clock = VirtualClock()
    clock.advance(90.5)
    assert (clock.now() - EPOCH).total_seconds() == 90.5


def test_the_clock_never_moves_back() -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_advance_to_an_earlier_time_keeps_the_clock() -> None:
    clock = VirtualClock()
    clock.advance(10)
    later = clock.now()
    clock.advance_to(EPOCH)
    assert clock.now() == later
