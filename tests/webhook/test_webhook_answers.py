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
