"""The manager wires its webhook's in-memory bind requests (World.asked) to its own
reconciler: handed over on the requests key, abandoned when it stops leading."""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import ClassCount, GPUBindRequest, GPUBindRequestSpec, NameRef, VMRef
from gpu_binder.binder import REQUESTS_KEY
from gpu_binder.kube.manager import Manager, Options
from gpu_binder.sim.memory import MemoryClient


def manager() -> Manager:
    client: Any = MemoryClient()
    return Manager(client, options=Options(metrics_port=None, leader_elect=False))


def asked(m: Manager) -> GPUBindRequest:
    request = GPUBindRequest(
        metadata=ObjectMeta(name="in-memory:vm-abcde", namespace="t"),
        spec=GPUBindRequestSpec(
            vm=VMRef(name="vm", uid="u-1"),
            vmi=NameRef(name="vm"),
            requests=(ClassCount(class_name="h100", count=1),),
        ),
    )
    m.world.asked["t/in-memory:vm-abcde"] = request
    return request


async def test_a_manager_that_stops_leading_abandons_the_requests_in_memory() -> None:
    m = manager()
    request = asked(m)
    waiting = asyncio.create_task(m.answers.wait(request, None))
    await asyncio.sleep(0)
    m._stopped_leading()
    assert await asyncio.wait_for(waiting, 1) == "abandoned"
    assert m.world.asked == {}


async def test_the_managers_webhook_hands_its_requests_over_on_the_requests_key() -> None:
    m = manager()
    assert m.admitter.ask_here is not None
    m.admitter.ask_here()
    assert await asyncio.wait_for(m.queue.get(), 1) == REQUESTS_KEY
