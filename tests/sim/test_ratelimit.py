"""The workqueue's retry timing: per item 5 ms doubling to 1000 s, a shared 10/s bucket."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpu_binder.sim.clock import EPOCH
from gpu_binder.sim.ratelimit import ItemBackoff, TokenBucket

T0 = EPOCH


def test_an_items_retries_double_from_five_milliseconds() -> None:
    backoff = ItemBackoff()
    waits = [(backoff.failed("a", T0) - T0).total_seconds() for _ in range(4)]
    assert waits == [0.005, 0.005, 0.005, 0.005]  # the earliest wake stands


def test_each_failure_doubles_the_next_wait() -> None:
    backoff = ItemBackoff()
    now, waits = T0, []
    for _ in range(4):
        at = backoff.failed("a", now)
        waits.append(round((at - now).total_seconds(), 3))
        now = at
        backoff.due(now)
    assert waits == [0.005, 0.01, 0.02, 0.04]


def test_the_wait_stops_growing_at_a_thousand_seconds() -> None:
    backoff = ItemBackoff(burst=10**6)
    for _ in range(30):
        backoff.failed("a", T0)
        backoff.due(T0 + timedelta(days=1))
    assert backoff.failed("a", T0) == T0 + timedelta(seconds=1000)


def test_a_success_forgets_the_failures() -> None:
    backoff = ItemBackoff()
    for _ in range(5):
        backoff.failed("a", T0)
        backoff.due(T0 + timedelta(days=1))
    backoff.forget("a")
    assert backoff.failed("a", T0) == T0 + timedelta(seconds=0.005)


def test_retries_beyond_the_bucket_wait_their_turn() -> None:
    backoff = ItemBackoff(burst=2, rate=10)
    waits = [(backoff.failed(k, T0) - T0).total_seconds() for k in "abcd"]
    assert waits == [0.005, 0.005, 0.1, 0.2]


def test_due_gives_the_keys_whose_time_came_once() -> None:
    backoff = ItemBackoff()
    backoff.failed("a", T0)
    backoff.wake("b", T0 + timedelta(seconds=5))
    first = backoff.due(T0 + timedelta(seconds=1))
    assert (first, backoff.due(T0 + timedelta(seconds=1))) == ({"a"}, set())
    assert backoff.due(T0 + timedelta(seconds=5)) == {"b"}


def test_a_client_bucket_passes_a_burst_of_400_then_200_a_second() -> None:
    bucket = TokenBucket(200, 400)  # virt-controller's client (bench.kubevirt)
    waits = [bucket.reserve(0.0) for _ in range(402)]
    assert waits[:400] == [0.0] * 400
    assert waits[400:] == pytest.approx([0.005, 0.010])
    # A second refills 200 tokens, less the two lent.
    assert [bucket.reserve(1.0) for _ in range(198)] == [0.0] * 198
    assert bucket.reserve(1.0) > 0


def test_a_bucket_of_no_rate_never_waits() -> None:
    bucket = TokenBucket(0, 1)
    assert [bucket.reserve(0.0) for _ in range(10)] == [0.0] * 10
