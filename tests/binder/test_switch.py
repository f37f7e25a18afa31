"""The `enabled` switch, the resync, and leadership: what runs when the binder is off."""

from __future__ import annotations

import pytest

from gpu_binder.api.types import RequestPhase
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import NotLeader

from .cluster import Cluster


def disabled() -> Cluster:
    cluster = Cluster(config=Config(enabled=False))
    cluster.gpu_class()
    return cluster


async def test_a_disabled_binder_binds_nothing() -> None:
    cluster = disabled()
    cluster.node("node-a")
    cluster.vm("vm", 2, running=True)
    await cluster.settle_after(minutes=1)
    assert cluster.set_of("vm") == []


async def test_a_disabled_binder_answers_no_request() -> None:
    cluster = disabled()
    cluster.node("node-a")
    cluster.vm("vm", 1)
    cluster.request("vm", 1)
    await cluster.answer_requests()
    await cluster.settle()
    assert cluster.answer("vm-bind").status.phase == RequestPhase.PENDING


async def test_a_disabled_binder_writes_no_class_status() -> None:
    cluster = disabled()
    cluster.node("node-a")
    await cluster.settle()
    assert cluster.gpu_class_status().devices == 0


async def test_a_disabled_binder_does_not_resync() -> None:
    cluster = disabled()
    cluster.node("node-a")
    assert (await cluster.run()).requeue_after is None


async def test_an_enabled_binder_resyncs_to_notice_grace_periods(cluster: Cluster) -> None:
    cluster.node("node-a")
    assert (await cluster.run()).requeue_after == cluster.config.resync


async def test_enabling_the_binder_binds_what_waited() -> None:
    cluster = disabled()
    cluster.node("node-a")
    cluster.vm("vm", 2)
    await cluster.settle()
    cluster.restart(Config(enabled=True))
    await cluster.settle()
    assert len(cluster.set_of("vm")) == 2


async def test_a_binder_that_lost_its_lease_stops_writing_at_once(cluster: Cluster) -> None:
    cluster.node("node-a")
    await cluster.settle()
    cluster.vm("vm", 2)
    cluster.binder.is_leader = lambda: False
    before = cluster.client.writes
    with pytest.raises(NotLeader):
        await cluster.run()
    assert cluster.client.writes == before
    assert cluster.world.devices.set_of("tenant/vm") == [], "nothing staged stays in the cache"
