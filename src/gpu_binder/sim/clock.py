"""The simulation's virtual clock: time moves only when the driver advances it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

# A fixed start, so runs with one seed print the same times.
EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


class VirtualClock:
    def __init__(self, start: datetime = EPOCH) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def __call__(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward; a negative step is refused, since the API's times never go back."""
        if seconds < 0:
            raise ValueError(f"cannot move the clock back by {-seconds}s")
        self._now += timedelta(seconds=seconds)
        return self._now

    def advance_to(self, t: datetime) -> datetime:
        """Move time to t if t is later; an earlier t leaves the clock where it is."""
        self._now = max(self._now, t)
        return self._now
