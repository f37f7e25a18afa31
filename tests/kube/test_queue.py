"""The work queue: each key once, the requests key first, fixed requeue and backoff."""

from __future__ import annotations

import asyncio

import pytest

from gpu_binder.kube.queue import ShutDown, WorkQueue


async def test_a_key_added_twice_is_handed_out_once() -> None:
    q = WorkQueue()
    q.add("pass")
    q.add("pass")
    assert await q.get() == "pass"
    assert len(q) == 0


async def test_the_requests_key_goes_before_keys_added_earlier() -> None:
    q = WorkQueue(first=["requests"])
    q.add("pass")
    q.add("requests")
    assert await q.get() == "requests"
    assert await q.get() == "pass"


async def test_a_key_added_while_processed_runs_once_more_after() -> None:
    q = WorkQueue()
    q.add("pass")
    key = await q.get()
    q.add("pass")
    assert len(q) == 0
    q.done(key)
    assert await q.get() == "pass"


async def test_add_after_requeues_at_a_fixed_delay_and_the_earlier_timer_wins() -> None:
    q = WorkQueue()
    q.add_after("pass", 0.05)
    q.add_after("pass", 10)
    async with asyncio.timeout(1):
        assert await q.get() == "pass"


async def test_failures_back_off_exponentially_until_forgotten() -> None:
    q = WorkQueue(base_delay=0.01, max_delay=0.04)
    loop = asyncio.get_running_loop()
    waits = []
    for _ in range(4):
        t = loop.time()
        q.add_rate_limited("pass")
        key = await q.get()
        q.done(key)
        waits.append(loop.time() - t)
    assert waits[0] < waits[2] and waits[3] >= 0.035
    q.forget("pass")
    assert q.failures("pass") == 0


async def test_shutdown_stops_a_waiting_worker() -> None:
    q = WorkQueue()
    waiting = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.shutdown()
    with pytest.raises(ShutDown):
        await waiting
