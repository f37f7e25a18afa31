"""Shared pieces of the embedded cluster's tests: a virtual clock and a store on it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from gpu_binder.api.types import GPUClass, GPUDevice
from gpu_binder.sim.clock import VirtualClock
from gpu_binder.sim.memory import MemoryClient

from .builders import T0


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock()


@pytest.fixture
def client() -> MemoryClient:
    """A store whose clock stands still at T0, for tests of the store alone."""
    return MemoryClient(clock=lambda: T0)


@pytest.fixture
def store(clock: VirtualClock) -> MemoryClient:
    return MemoryClient(clock=clock.now)


Classify = Callable[[GPUClass], Awaitable[None]]


@pytest.fixture
def classify(store: MemoryClient) -> Classify:
    """Give every device a class, as the binder's classification would."""

    async def run(cls: GPUClass) -> None:
        for d in store.objects(GPUDevice):
            update = {"class_name": cls.metadata.name, "phase": "Available"}
            status = d.status.model_copy(update=update)
            await store.update_status(d.model_copy(update={"status": status}))

    return run
