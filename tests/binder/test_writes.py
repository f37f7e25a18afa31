"""How a step's writes are made: together, up to a bound, wave by wave; a conflict starts
no more of them and un-stages every one not made."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_binder.api.types import GPUBindRequest, GPUDevice, RequestPhase
from gpu_binder.binder.reconciler import WRITES_IN_FLIGHT

from .cluster import NAMESPACE, Cluster


class Recorded:
    """The binder's client: each status write takes a moment, and is logged in order."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.in_flight = 0
        self.most = 0
        self.made: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    async def update_status(self, obj: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(0.001)
            written = await self.client.update_status(obj)
            self.made.append(f"{type(obj).__name__}/{obj.metadata.name}")
            return written
        finally:
            self.in_flight -= 1


def record_writes(cluster: Cluster) -> Recorded:
    recorded = Recorded(cluster.binder.client)
    cluster.binder.client = recorded
    return recorded


async def test_a_steps_writes_are_made_together_up_to_a_bound(cluster: Cluster) -> None:
    vms = WRITES_IN_FLIGHT // 2 + 4  # more binds than the bound
    for n in range(vms // 4 + 1):
        cluster.node(f"node-{n}", 8)
    await cluster.settle()
    for n in range(vms):
        cluster.vm(f"vm-{n}", 2)
    recorded = record_writes(cluster)
    await cluster.run()
    assert sum(w.startswith("GPUDevice/") for w in recorded.made) == 2 * vms
    assert recorded.most == WRITES_IN_FLIGHT


def answered_after_its_devices(cluster: Cluster, recorded: Recorded) -> list[int]:
    """Where each answer was made among the writes; each after its own devices' binds."""
    made = recorded.made
    at = []
    for r in cluster.client.objects(GPUBindRequest):
        if r.metadata.namespace != NAMESPACE:
            continue
        answer = made.index(f"GPUBindRequest/{r.metadata.name}")
        binds = [made.index(f"GPUDevice/{d}") for d in r.status.devices]
        assert len(binds) == 2 and max(binds) < answer
        at.append(answer)
    return sorted(at)


async def test_a_requests_answer_is_written_after_its_devices(cluster: Cluster) -> None:
    cluster.node("node-a", 8)
    await cluster.settle()
    for n in range(4):
        cluster.vm(f"vm-{n}", 2)
        cluster.request(f"vm-{n}", 2)
    recorded = record_writes(cluster)
    await cluster.answer_requests()
    assert len(answered_after_its_devices(cluster, recorded)) == 4
    assert sum(w.startswith("GPUDevice/") for w in recorded.made) == 8


async def test_an_answer_goes_once_its_own_devices_are_written_not_after_the_whole_pass(
    cluster: Cluster,
) -> None:
    """A pass of a few dozen answers binds more devices than it writes at once: the first
    answers are made ahead of the binds still waiting, two round trips in, as the webhooks
    that wait for them have a bind timeout."""
    vms = WRITES_IN_FLIGHT // 2 + 4  # more binds than the bound
    for n in range(vms // 4 + 1):
        cluster.node(f"node-{n}", 8)
    await cluster.settle()
    for n in range(vms):
        cluster.vm(f"vm-{n}", 2)
        cluster.request(f"vm-{n}", 2)
    recorded = record_writes(cluster)
    await cluster.answer_requests()
    binds = [i for i, w in enumerate(recorded.made) if w.startswith("GPUDevice/")]
    assert len(binds) == 2 * vms > WRITES_IN_FLIGHT
    answers = answered_after_its_devices(cluster, recorded)
    assert len(answers) == vms
    assert answers[0] < max(binds)


async def test_a_conflict_starts_no_more_writes_and_unstages_those_not_made(
    cluster: Cluster,
) -> None:
    cluster.node("node-a", 8)
    cluster.node("node-b", 8)
    await cluster.settle()
    for n in range(8):
        cluster.vm(f"vm-{n}", 2)
        cluster.request(f"vm-{n}", 2)
    # A concurrent writer wins the race for one device the answers take.
    loser = sorted(d.metadata.name for d in cluster.client.objects(GPUDevice))[3]
    cluster.client.conflict_next_write(GPUDevice, loser)
    result = await cluster.answer_requests()
    assert result.aborted and result.conflicts == 1
    # Only what was written is in the world: no device bound that the API server does not
    # hold bound, and no answer but of devices it holds bound to the request's VM (an
    # answer goes as soon as its own devices are written); the loser's stays unanswered.
    for d in cluster.client.objects(GPUDevice):
        assert cluster.world.devices.by_name[d.metadata.name].status == d.status
    held = cluster.client.peek(GPUDevice, loser)
    assert held is not None and held.status.binding is None
    for r in cluster.client.objects(GPUBindRequest):
        if r.metadata.namespace != NAMESPACE or r.status.phase == RequestPhase.PENDING:
            continue
        assert r.status.phase == RequestPhase.BOUND and loser not in r.status.devices
        for name in r.status.devices:
            d = cluster.client.peek(GPUDevice, name)
            assert d is not None and d.status.binding is not None
            assert d.status.binding.vm.name == r.spec.vm.name
    # The next pass answers them all.
    await cluster.answer_requests()
    assert all(r.status.phase == RequestPhase.BOUND for r in cluster.client.objects(GPUBindRequest))
