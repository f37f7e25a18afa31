"""Leader election on a real Lease: one leader, fenced by its renew deadline, handed over."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime

import pytest
from realcluster import Fleet, eventually, namespace, uid

from conftest import StartBinder
from gpu_binder.client.errors import Conflict
from gpu_binder.envtest import ControlPlane
from gpu_binder.kube import KubeClient
from gpu_binder.kube.leaderelection import LeaderElector, Timings, micro_time

pytestmark = pytest.mark.controlplane

FAST = Timings(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


def elector(admin: KubeClient, lease: str, identity: str, **kw: object) -> LeaderElector:
    return LeaderElector(admin, "default", lease, identity, FAST, **kw)  # type: ignore[arg-type]


async def test_one_candidate_leads_and_a_clean_stop_hands_over_at_once(admin: KubeClient) -> None:
    lease = f"l-{uid()}"
    a, b = elector(admin, lease, "a"), elector(admin, lease, "b")
    stop_a, stop_b = asyncio.Event(), asyncio.Event()
    run_a = asyncio.create_task(a.run(stop_a))
    await eventually(lambda: _true(a.is_leader()), what="a leads")
    run_b = asyncio.create_task(b.run(stop_b))
    await asyncio.sleep(3 * FAST.retry_period)
    assert a.is_leader() and not b.is_leader()
    spec = (await admin.request("GET", a.path))["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 2
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    assert spec["leaseTransitions"] == 0

    stop_a.set()
    await run_a
    released = time.monotonic()
    await eventually(lambda: _true(b.is_leader()), what="b leads")

    # Released, not expired: b took over within a retry, not a lease duration.
    assert time.monotonic() - released < FAST.lease_duration
    spec = (await admin.request("GET", b.path))["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    stop_b.set()
    await run_b


async def test_a_crashed_leaders_lease_is_taken_only_after_it_expires(admin: KubeClient) -> None:
    lease = f"l-{uid()}"
    crashed = elector(admin, lease, "crashed")
    assert await crashed.try_acquire_or_renew()
    b = elector(admin, lease, "b")
    stop = asyncio.Event()
    started = time.monotonic()
    run = asyncio.create_task(b.run(stop))

    await eventually(lambda: _true(b.is_leader()), timeout=10, what="b leads")

    assert time.monotonic() - started >= FAST.lease_duration
    spec = (await admin.request("GET", b.path))["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    stop.set()
    await run


async def test_the_fence_drops_the_moment_the_renew_deadline_passes(admin: KubeClient) -> None:
    now = [1000.0]
    leader = elector(admin, f"l-{uid()}", "a", monotonic=lambda: now[0])
    assert await leader.try_acquire_or_renew()
    assert leader.is_leader()

    now[0] += FAST.renew_deadline - 0.01
    assert leader.is_leader()
    now[0] += 0.02
    assert not leader.is_leader()


async def _true(value: bool) -> bool:
    return value


async def test_a_binder_whose_lease_is_taken_stops_writing_and_resumes_when_it_is_back(
    control_plane: ControlPlane, admin: KubeClient, start_binder: StartBinder
) -> None:
    fleet = Fleet(admin)
    await fleet.create_class()
    await fleet.create_node("a")
    ns = namespace(control_plane)
    binder = await start_binder()
    path = binder.elector.path
    deadline = binder.options.timings.renew_deadline

    await _set_holder(admin, path, "intruder")
    taken = time.monotonic()
    await eventually(lambda: _true(not binder.is_leader()), what="the fence dropped")
    assert time.monotonic() - taken <= deadline + 1.0
    await fleet.create_vm(ns, "vm", gpus=1)
    await asyncio.sleep(1.5)
    assert await fleet.set_of(ns, "vm") == []

    await _set_holder(admin, path, "")
    await eventually(lambda: fleet.set_of(ns, "vm"), what="bound by the leader again")


async def _set_holder(admin: KubeClient, path: str, holder: str) -> None:
    """Take the Lease for `holder`: read and write again when the binder renewed it in
    between (its renewal is a write of its own, so a 409 here is the race, not a fault)."""
    for _ in range(10):
        lease = await admin.request("GET", path)
        now = micro_time(datetime.now(UTC))
        lease["spec"].update(holderIdentity=holder, renewTime=now, leaseDurationSeconds=60)
        try:
            await admin.request("PUT", path, lease)
            return
        except Conflict:
            continue
    raise AssertionError(f"the Lease could not be taken for {holder!r} in 10 tries")
