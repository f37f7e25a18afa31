"""Read-modify-write retries a write that lost a race, from a fresh read."""

from __future__ import annotations

from gpu_binder.api.types import GPUDevice
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify

from .builders import device, with_slot


async def test_a_write_that_lost_a_race_is_made_again_on_the_fresh_object(
    client: MemoryClient,
) -> None:
    d = await client.create(device())
    client.conflict_next_write(GPUDevice, d.name)
    written = await modify(client, GPUDevice, d.name, "", lambda cur: with_slot(cur, 4))
    assert written is not None and written.spec.slot == 4
    assert client.conflicts_injected == 1


async def test_nothing_is_written_when_the_change_is_none(client: MemoryClient) -> None:
    d = await client.create(device())
    assert await modify(client, GPUDevice, d.name, "", lambda cur: None) is None
    assert client.writes == 1


async def test_a_missing_object_is_not_written(client: MemoryClient) -> None:
    assert await modify(client, GPUDevice, "gone", "", lambda cur: cur) is None
