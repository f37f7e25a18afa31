"""Admissions wait for the binder's answer on the process's own world (webhook.answers):
one watch of bind requests for every waiting admission, not one each."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_binder.api.types import GPUBindRequest
from gpu_binder.binder.config import Config
from gpu_binder.binder.reconciler import REQUESTS_KEY
from gpu_binder.webhook.answers import Answers
from gpu_binder.webhook.decision import Admitter

from .webhook_cluster import Cluster, patched, review, vmi_of


def waiting_on_the_world(cluster: Cluster) -> tuple[Admitter, list[Any]]:
    """An admitter told of answers by the world, and the watches it opens."""
    answers = Answers()
    cluster.world.on_request = answers.seen
    watches: list[Any] = []
    client = cluster.client
    real_watch = client.watch

    def watch(*args: Any, **kwargs: Any) -> Any:
        watches.append(args)
        return real_watch(*args, **kwargs)

    client.watch = watch  # type: ignore[method-assign]
    admitter = Admitter(cluster.world, client, Config(), answers=answers)
    cluster.admitters.append(admitter)
    return admitter, watches


async def test_a_burst_of_admissions_waits_on_the_worlds_answers_opening_no_watch(
    cluster: Cluster,
) -> None:
    vms = [cluster.vm(f"vm{n}", {"h100": 1}) for n in range(4)]
    for slot in range(4):
        cluster.gpu("node-a", slot)
    admitter, watches = waiting_on_the_world(cluster)

    async def binder() -> None:
        while len(cluster.world.pending_requests) < len(vms):
            await asyncio.sleep(0.001)
        await cluster.reconciler().reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    bodies = [vmi_of(vm) for vm in vms]
    responses = await asyncio.gather(*(admitter.admit(review(b)) for b in bodies))
    await answering
    for body, response in zip(bodies, responses, strict=True):
        patched(response, body)
    assert watches == []
    assert await cluster.requests_left() == []


async def test_a_request_deleted_while_waiting_is_answered_deleted() -> None:
    answers = Answers()
    spec = {
        "vm": {"name": "vm"},
        "vmi": {"name": "vm"},
        "requests": [{"className": "h100", "count": 1}],
    }
    request = GPUBindRequest.model_validate(
        {"metadata": {"name": "vm-abcde", "namespace": "t"}, "spec": spec}
    )
    waiting = asyncio.create_task(answers.wait(request, None))
    await asyncio.sleep(0)
    answers.seen(request, deleted=True)
    assert await waiting == "deleted"
    assert len(answers) == 0


async def test_the_leaders_own_webhook_admits_on_the_binds_before_the_answers_write(
    cluster: Cluster,
) -> None:
    """In the leader, an admission waiting for its request is told the Bound answer as its
    write starts, once its devices' binds are written: it admits on those, a round trip
    before the answer's own write comes back; the answer is written all the same."""
    vm = cluster.vm("vm1", {"h100": 1})
    gpu = cluster.gpu("node-a", 0)
    answers = Answers()
    cluster.world.on_request = answers.seen
    admitter = Admitter(
        cluster.world, cluster.client, Config(), answers=answers, leading=lambda: True
    )
    cluster.admitters.append(admitter)
    reconciler = cluster.reconciler()
    reconciler.on_answer = lambda request: answers.seen(request, False)
    held, release = asyncio.Event(), asyncio.Event()
    real_update_status = cluster.client.update_status

    async def update_status(obj: Any) -> Any:
        if isinstance(obj, GPUBindRequest):
            held.set()
            await release.wait()  # the answer's write, slow to come back
        return await real_update_status(obj)

    cluster.client.update_status = update_status  # type: ignore[method-assign]

    async def binder() -> None:
        while not cluster.world.pending_requests:
            await asyncio.sleep(0.001)
        await reconciler.reconcile(REQUESTS_KEY)

    answering = asyncio.create_task(binder())
    body = vmi_of(vm)
    admitted = patched(await asyncio.wait_for(admitter.admit(review(body)), 5), body)
    assert held.is_set() and not answering.done()  # admitted while the answer was written
    assert gpu.name in str(admitted)
    release.set()
    await answering
    assert await cluster.requests_left() == []
