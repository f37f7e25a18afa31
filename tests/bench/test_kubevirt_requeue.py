"""bench start retries a refused VMI or launcher pod as KubeVirt's controllers do: their
workqueue's rate limiter (client-go's DefaultTypedControllerRateLimiter), not a flat delay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpu_binder.bench.kubevirt import Requeue

T0 = datetime(2025, 1, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def test_a_keys_retries_back_off_from_5_ms_doubling_and_a_success_starts_again() -> None:
    clock = Clock()
    queue = Requeue(clock)
    waits = []
    for _ in range(5):
        waits.append(queue.after_failure("bench/vm-0"))
        clock.sleep(waits[-1])
    assert waits == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    queue.succeeded("bench/vm-0")
    assert queue.after_failure("bench/vm-0") == pytest.approx(0.005)


def test_past_a_burst_of_100_retries_all_keys_share_10_a_second() -> None:
    clock = Clock()
    queue = Requeue(clock)
    waits = [queue.after_failure(f"bench/vm-{i}") for i in range(110)]
    assert waits[:100] == pytest.approx([0.005] * 100)
    assert waits[100:] == pytest.approx([0.1 * (n + 1) for n in range(10)])


def test_the_wait_is_capped_at_1000_s() -> None:
    clock = Clock()
    queue = Requeue(clock)
    for _ in range(30):
        wait = queue.after_failure("bench/vm-0")
        clock.sleep(wait)
    assert wait == pytest.approx(1000.0)
