"""bench start plays virt-controller's throughput as KubeVirt sets it: a controller's
threads bound how many of its creates wait on the API server (and so on gpu-binder's
webhook) at once, and its client's token bucket bounds its requests a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from gpu_binder.bench import kubevirt
from gpu_binder.client.errors import ApiError
from gpu_binder.kube import KubeClient


class SlowApiServer:
    """Answers each POST after `seconds`, refusing an object's first `refusals[name]`."""

    def __init__(self, seconds: float = 0.01, refusals: dict[str, int] | None = None) -> None:
        self.seconds = seconds
        self.refusals = refusals or {}
        self.in_flight = 0
        self.most_in_flight = 0
        self.tries: dict[str, int] = {}
        self.created: list[str] = []
        self.created_at: dict[str, float] = {}

    async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        name = body["metadata"]["name"]
        self.tries[name] = self.tries.get(name, 0) + 1
        if self.tries[name] <= self.refusals.get(name, 0):
            raise ApiError(f"{name}: no answer within 5s")
        self.created.append(name)
        self.created_at[name] = time.perf_counter()
        return body


def vmi(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "bench"}}


async def create_all(
    server: SlowApiServer, controller: kubevirt.VirtController, n: int
) -> list[str]:
    refused: list[str] = []
    queue = kubevirt.Requeue()
    client = cast(KubeClient, server)
    await asyncio.gather(
        *(kubevirt.create_vmi(client, vmi(f"vm-{i}"), refused, queue, controller) for i in range(n))
    )
    return refused


def test_the_vm_controllers_3_threads_send_at_most_3_vmi_creates_at_once() -> None:
    server = SlowApiServer()
    asyncio.run(create_all(server, kubevirt.VirtController(), 30))
    assert server.most_in_flight == 3
    assert len(server.tries) == 30


def test_zero_threads_send_every_vmi_create_at_once() -> None:
    server = SlowApiServer()
    asyncio.run(create_all(server, kubevirt.VirtController(vm_threads=0), 30))
    assert server.most_in_flight == 30


class SlowRequeue(kubevirt.Requeue):
    def after_failure(self, key: str) -> float:
        return 0.3


def test_a_refused_create_waits_its_backoff_on_no_thread() -> None:
    # One thread, vm-0 refused once and queued again 0.3 s later: held through that
    # backoff, the thread would send no other create meanwhile.
    server = SlowApiServer(seconds=0.001, refusals={"vm-0": 1})
    controller = kubevirt.VirtController(vm_threads=1)
    client = cast(KubeClient, server)
    queue = SlowRequeue()

    async def run() -> float:
        creates = [
            kubevirt.create_vmi(client, vmi(f"vm-{i}"), [], queue, controller) for i in range(5)
        ]
        t = time.perf_counter()
        await asyncio.gather(*creates[1:], asyncio.create_task(creates[0]))
        return t

    began = asyncio.run(run())
    assert server.created == ["vm-1", "vm-2", "vm-3", "vm-4", "vm-0"]
    assert server.created_at["vm-4"] - began < 0.2


def test_the_first_create_sent_is_when_a_thread_took_the_vmi() -> None:
    server = SlowApiServer(seconds=0.05)
    controller = kubevirt.VirtController(vm_threads=1)
    client = cast(KubeClient, server)

    async def both() -> tuple[float, float]:
        queue = kubevirt.Requeue()
        (_, a), (_, b) = await asyncio.gather(
            kubevirt.create_vmi(client, vmi("vm-a"), [], queue, controller),
            kubevirt.create_vmi(client, vmi("vm-b"), [], queue, controller),
        )
        return a, b

    a, b = asyncio.run(both())
    assert b - a == pytest.approx(0.05, abs=0.04)  # vm-b waited for the thread, unsent
