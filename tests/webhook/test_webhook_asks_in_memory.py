"""In the leader, the webhook hands a bind request to its own reconciler in memory
(World.asked) rather than creating a GPUBindRequest, and admits on the answer told once the
binds are written; a replica that does not lead keeps the object's way."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from gpu_binder.api.types import GPUBindRequest, GPUDevice
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import REQUESTS_KEY, NotLeader, Reconciler
from gpu_binder.sim.builders import vm_object
from gpu_binder.webhook.answers import Answers
from gpu_binder.webhook.decision import Admitter

from .webhook_cluster import H100, NS, Cluster, patched, review, vmi_of


def leader(
    cluster: Cluster, leading: list[bool] | None = None, **config: Any
) -> tuple[Admitter, Reconciler, list[int]]:
    """The leader's webhook and reconciler wired as kube.manager wires them; the list counts
    the webhook's wake-ups of the requests key."""
    flag = leading if leading is not None else [True]
    answers = Answers()
    cluster.world.on_request = answers.seen
    woken: list[int] = []
    admitter = Admitter(
        cluster.world,
        cluster.client,
        Config(**config),
        answers=answers,
        leading=lambda: flag[0],
        ask_here=lambda: woken.append(1),
    )
    cluster.admitters.append(admitter)
    reconciler = cluster.reconciler()
    reconciler.on_answer = lambda request: answers.seen(request, False)
    reconciler.is_leader = lambda: flag[0]
    return admitter, reconciler, woken


def counting_request_writes(cluster: Cluster) -> list[str]:
    """Every create, status write or delete of a GPUBindRequest the client is asked for."""
    seen: list[str] = []
    client = cluster.client
    create, update_status, delete = client.create, client.update_status, client.delete

    async def counted_create(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(obj, GPUBindRequest):
            seen.append("create")
        return await create(obj, *args, **kwargs)

    async def counted_status(obj: Any) -> Any:
        if isinstance(obj, GPUBindRequest):
            seen.append("status")
        return await update_status(obj)

    async def counted_delete(kind: Any, *args: Any, **kwargs: Any) -> Any:
        if kind is GPUBindRequest:
            seen.append("delete")
        return await delete(kind, *args, **kwargs)

    client.create = counted_create  # type: ignore[method-assign]
    client.update_status = counted_status  # type: ignore[method-assign]
    client.delete = counted_delete  # type: ignore[method-assign]
    return seen


async def answer_when_asked(cluster: Cluster, reconciler: Reconciler, asked: int = 1) -> None:
    while len(cluster.world.asked) < asked:
        await asyncio.sleep(0.001)
    await reconciler.reconcile(REQUESTS_KEY)


async def test_the_leaders_webhook_admits_without_a_bind_request_object(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 0)
    admitter, reconciler, woken = leader(cluster)
    writes = counting_request_writes(cluster)
    answering = asyncio.create_task(answer_when_asked(cluster, reconciler))
    body = vmi_of(vm)
    admitted = patched(await asyncio.wait_for(admitter.admit(review(body)), 5), body)
    await answering
    assert gpu.name in str(admitted)
    assert writes == []
    assert woken == [1]
    assert cluster.world.asked == {}
    assert await cluster.requests_left() == []
    bound = cluster.client.peek(GPUDevice, gpu.name)
    assert bound is not None and bound.status.binding is not None
    assert bound.status.binding.vm.name == "vm1"


async def test_a_replica_not_leading_asks_by_a_bind_request_object(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0)
    admitter, _, woken = leader(cluster, leading=[False])
    writes = counting_request_writes(cluster)
    other = cluster.reconciler()  # the leader, in another process

    async def binder() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        await other.reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    body = vmi_of(vm)
    patched(await asyncio.wait_for(admitter.admit(review(body)), 5), body)
    await answering
    await cluster.requests_left()
    assert writes == ["create", "status", "delete"]
    assert woken == []
    assert cluster.world.asked == {}


async def test_the_leaders_webhook_admits_only_once_the_binds_are_written(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0)
    admitter, reconciler, _ = leader(cluster)
    held, release = asyncio.Event(), asyncio.Event()
    real_update_status = cluster.client.update_status

    async def update_status(obj: Any) -> Any:
        if isinstance(obj, GPUDevice):
            held.set()
            await release.wait()  # the bind, slow to come back
        return await real_update_status(obj)

    cluster.client.update_status = update_status  # type: ignore[method-assign]
    answering = asyncio.create_task(answer_when_asked(cluster, reconciler))
    body = vmi_of(vm)
    admitting = asyncio.create_task(admitter.admit(review(body)))
    await asyncio.wait_for(held.wait(), 5)
    await asyncio.sleep(0.01)
    assert not admitting.done()  # the bind is not written yet
    release.set()
    patched(await asyncio.wait_for(admitting, 5), body)
    await answering


async def test_a_request_in_memory_abandoned_is_refused_saying_the_leader_changed(
    cluster: Cluster,
) -> None:
    """What kube.manager does when this process stops leading: no reconciler here answers,
    and the next leader never sees the request."""
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0)
    admitter, _, _ = leader(cluster)
    assert admitter.answers is not None
    admitting = asyncio.create_task(admitter.admit(review(vmi_of(vm))))
    while not cluster.world.asked:
        await asyncio.sleep(0.001)
    for asked in cluster.world.asked.values():
        admitter.answers.abandon(asked)
    response = (await asyncio.wait_for(admitting, 5))["response"]
    assert not response["allowed"]
    assert "leader changed" in response["status"]["message"]


async def test_a_lease_lost_before_the_binds_leaves_the_request_unanswered_and_unbound(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 0)
    leading = [True]
    admitter, reconciler, _ = leader(cluster, leading, bind_timeout=timedelta(milliseconds=200))
    admitting = asyncio.create_task(admitter.admit(review(vmi_of(vm))))
    while not cluster.world.asked:
        await asyncio.sleep(0.001)
    leading[0] = False
    with pytest.raises(NotLeader):
        await reconciler.reconcile(REQUESTS_KEY)
    response = (await asyncio.wait_for(admitting, 5))["response"]
    assert not response["allowed"]
    assert "no answer" in response["status"]["message"]
    device = cluster.client.peek(GPUDevice, gpu.name)
    assert device is not None and device.status.binding is None


async def test_a_vms_request_in_memory_timed_out_is_waited_on_by_the_retry(
    cluster: Cluster,
) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    cluster.gpu("node-a", 0)
    admitter, reconciler, woken = leader(cluster, bind_timeout=timedelta(milliseconds=50))
    first = (await admitter.admit(review(vmi_of(vm))))["response"]
    assert not first["allowed"]
    [kept] = cluster.world.asked.values()
    answering = asyncio.create_task(answer_when_asked(cluster, reconciler))
    body = vmi_of(vm)
    patched(await asyncio.wait_for(admitter.admit(review(body)), 5), body)
    await answering
    assert woken == [1]  # the retry handed nothing new over
    assert cluster.world.asked == {}
    assert kept.metadata.name.startswith("in-memory:")


def standalone() -> dict[str, Any]:
    """A VMI of no VM: the VM it is rendered from is never in the cluster."""
    body = vmi_of(vm_object("lone", NS, [H100]))
    del body["metadata"]["ownerReferences"]
    return body


async def test_a_standalone_vmis_request_in_memory_timed_out_is_withdrawn(
    cluster: Cluster,
) -> None:
    """Its name may be another object's by the retry: nothing is left for a pass to bind."""
    cluster.gpu("node-a", 0)
    admitter, _, _ = leader(cluster, bind_timeout=timedelta(milliseconds=50))
    response = (await admitter.admit(review(standalone())))["response"]
    assert "no answer" in response["status"]["message"]
    assert cluster.world.asked == {}
