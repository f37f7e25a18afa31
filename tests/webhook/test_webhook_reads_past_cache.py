"""The VMI webhook pins to what the API server holds, not to what its world says: the
leader's world holds decisions staged but not written (a 409 un-stages them), another
replica's lags behind the leader's writes."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.api.types import (
    Binding,
    BindReason,
    GPUBindRequest,
    GPUDevice,
    ObjectRef,
    Phase,
    RequestPhase,
)
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import REQUESTS_KEY
from gpu_binder.sim.admission import outcome
from gpu_binder.sim.launcher import render_launcher_pod
from gpu_binder.webhook.decision import Admitter, Respond
from gpu_binder.webhook.pods import PodPinner
from gpu_binder.webhook.review import review_request

from .webhook_cluster import NS, T0, Cluster, patched, review, vmi_of


async def test_a_set_only_the_world_holds_goes_the_requests_way(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    free = cluster.gpu("node-b", 2)
    # The leader staged the bind: in its world, not (yet) in the API server.
    ref = ObjectRef(namespace=NS, name="vm1", uid=vm.metadata.uid)
    binding = Binding(vm=ref, bound_at=T0, reason=BindReason.ORDER)
    staged = free.model_copy(
        update={"status": free.status.model_copy(update={"binding": binding, "phase": Phase.BOUND})}
    )
    cluster.world.put_device(staged)
    admitter = cluster.admitter(bind_timeout=timedelta(milliseconds=50))
    # Without I/O (the embedded cluster, whose world is what was written) it is pinned...
    assert isinstance(admitter.decide(review(vmi_of(vm))), Respond)
    # ...through the API server it asks the binder, which answers after its writes.
    response = await admitter.admit(review(vmi_of(vm)))
    assert response["response"]["allowed"] is False
    assert "no answer from gpu-binder" in response["response"]["status"]["message"]


async def test_an_answer_whose_gpus_were_released_since_is_denied(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-b", 2)
    admitter = cluster.admitter()
    body = review(vmi_of(vm))
    decided = admitter.decide(body)
    assert not isinstance(decided, Respond)
    answered = decided.request.model_copy(
        update={
            "status": decided.request.status.model_copy(
                update={"phase": RequestPhase.BOUND, "node_name": "node-b", "devices": (gpu.name,)}
            )
        }
    )
    assert isinstance(answered, GPUBindRequest)
    response = admitter.answer(body, answered)
    assert response["response"]["allowed"] is False
    assert (
        f"GPU {gpu.name} that gpu-binder answered with is no longer bound to {NS}/vm1"
        in (response["response"]["status"]["message"])
    )


def reads_of_devices(cluster: Cluster) -> list[str]:
    """The GETs of GPUDevices the cluster's client serves from now on."""
    reads: list[str] = []
    real_get = cluster.client.get

    async def get(kind: Any, name: str, namespace: str = "") -> Any:
        if kind is GPUDevice:
            reads.append(name)
        return await real_get(kind, name, namespace)

    cluster.client.get = get  # type: ignore[method-assign]
    return reads


def leader_admitter(cluster: Cluster, leading: list[bool]) -> Admitter:
    admitter = Admitter(cluster.world, cluster.client, Config(), leading=lambda: leading[0])
    cluster.admitters.append(admitter)
    return admitter


async def test_the_leader_pins_to_its_own_writes_without_reading_them(cluster: Cluster) -> None:
    """The devices the leader's pass wrote are, in its world, the API server's responses:
    a restart's pin and an answer's devices need no read while it leads."""
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 4)
    leading = [True]
    admitter = leader_admitter(cluster, leading)
    reads = reads_of_devices(cluster)

    async def binder() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    body = vmi_of(vm)
    patched(await admitter.admit(review(body)), body)
    await answering
    assert reads == []  # the answer's device: the leader's own write
    assert cluster.world.written_device(gpu.name) is not None
    patched(await admitter.admit(review(vmi_of(vm), uid="review-2")), body)
    assert reads == []  # the complete set's pin: the same
    leading[0] = False  # the lease lost: another may have moved it since
    patched(await admitter.admit(review(vmi_of(vm), uid="review-3")), body)
    assert reads == [gpu.name]


async def test_a_staged_or_newer_device_is_read(cluster: Cluster) -> None:
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 4)
    world = cluster.world
    admitter = leader_admitter(cluster, [True])

    async def binder() -> None:
        while not world.pending_requests:
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    await admitter.admit(review(vmi_of(vm)))
    await answering
    own = world.written_device(gpu.name)
    assert own is not None
    world.staged.add(gpu.name)  # a pass's decision over it, not written yet
    assert world.written_device(gpu.name) is None
    world.staged.discard(gpu.name)
    # Someone else's write (the agent's), as its event: newer than the leader's own.
    newer = cluster.client.put(cluster.client.peek(GPUDevice, gpu.name))
    assert newer.metadata.resource_version != own.metadata.resource_version
    assert world.written_device(gpu.name) is None
    reads = reads_of_devices(cluster)
    patched(await admitter.admit(review(vmi_of(vm), uid="review-2")), vmi_of(vm))
    assert reads == [gpu.name]


async def test_the_leaders_pod_webhook_pins_to_its_own_writes_without_reading_them(
    cluster: Cluster,
) -> None:
    """The pod webhook reads the set past the cache, as the VMI webhook does, and in the
    leader takes the devices it wrote itself as read: a burst's every launcher pod read its
    set's devices once more, while the leader had just written them (bench start)."""
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 4)
    leading = [True]
    admitter = leader_admitter(cluster, leading)

    async def binder() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    vmi = patched(await admitter.admit(review(vmi_of(vm))), vmi_of(vm))
    await answering
    stored = cluster.client.put(VirtualMachineInstance.from_dict(vmi))
    pod = render_launcher_pod(stored.to_dict())
    body = review_request(pod, uid="pod-1", namespace=NS, group="", version="v1", kind="Pod")
    pinner = PodPinner(cluster.world, Config(), client=cluster.client, leading=lambda: leading[0])
    reads = reads_of_devices(cluster)

    assert outcome(pod, await pinner.admit(body)) is not None
    assert reads == []  # the set's device: the leader's own write
    cluster.world.staged.add(gpu.name)  # a pass's decision over it, not written yet
    assert (await pinner.admit(body))["response"]["allowed"]
    assert reads == [gpu.name]
    cluster.world.staged.discard(gpu.name)
    leading[0] = False  # the lease lost: another may have moved it since
    assert (await pinner.admit(body))["response"]["allowed"]
    assert reads == [gpu.name, gpu.name]
