"""The running agent watches its GPUDevices and the GPUClasses instead of polling them.

Changes made by others wake a pass at once; its own writes wake nothing; the timer's
rescans of an unchanged node make no request at all; a watch that cannot be had (say an
old ClusterRole without `watch`) leaves the agent listing at each pass, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fake_sysfs import L40S_GPUS, FakeHost, l40s_x4
from recording import Recording

from gpu_binder.agent.runner import AgentConfig, NodeAgent
from gpu_binder.agent.sync import NODE_LABEL
from gpu_binder.agent.watch import Watched
from gpu_binder.api.kinds import T, resource_of
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import (
    FINALIZER,
    DeviceMatch,
    GPUClass,
    GPUClassSpec,
    GPUDevice,
    GPUDeviceSpec,
    GPUDeviceStatus,
    Phase,
)
from gpu_binder.client.errors import Forbidden
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient

NODE = "node-a"
RELEASED = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
GPU = L40S_GPUS[0]


class NoWatch(Recording):
    """An agent whose ClusterRole predates the watch verb."""

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent[T]]:
        self.note("watch", kind)

        async def refused() -> AsyncIterator[WatchEvent[T]]:
            raise Forbidden(f"{resource_of(kind).plural} is forbidden: cannot watch")
            yield  # an async generator, as the real client's watch is

        return refused()


async def until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not done():
            await asyncio.sleep(0.01)


async def eventually(probe: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await probe():
            await asyncio.sleep(0.01)


@asynccontextmanager
async def running(agent: NodeAgent) -> AsyncIterator[NodeAgent]:
    """The agent's run loop, its watches live and its first pass done."""
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(
            lambda: (
                agent.passes >= 1
                and agent.devices is not None
                and agent.devices.live
                and agent.classes is not None
                and agent.classes.live
            )
        )
        yield agent
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def make_agent(
    root: Path, client: MemoryClient, interval: float = 3600, resync: float = 300
) -> NodeAgent:
    config = AgentConfig(node=NODE, root=root, interval=interval, resync=resync)
    return NodeAgent(config, client, clock=lambda: datetime.now(UTC))


def device(client: MemoryClient, address: str = GPU) -> GPUDevice:
    return next(d for d in client.objects(GPUDevice) if d.spec.pci_address == address)


async def clean(client: MemoryClient, address: str = GPU) -> None:
    """What the binder does when a VM lets the GPU go."""
    d = device(client, address)
    status = GPUDeviceStatus(phase=Phase.CLEANING, released_at=RELEASED)
    await client.update_status(d.model_copy(update={"status": status}))


def reset_writes(host: FakeHost, address: str = GPU) -> str:
    return (host.path(address) / "reset").read_text()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[FakeHost]:
    yield l40s_x4(tmp_path)


# --- the running agent ------------------------------------------------------------------


async def test_a_gpu_entering_cleaning_is_reset_at_once_not_at_the_next_rescan(
    host: FakeHost,
) -> None:
    client = Recording()
    async with running(make_agent(host.root, client)):
        await clean(client)
        await eventually(lambda: asyncio.sleep(0, device(client).spec.last_reset is not None))
    assert reset_writes(host) == "1"
    assert [a for a in L40S_GPUS if reset_writes(host, a)] == [GPU]


async def test_its_own_writes_wake_no_pass(host: FakeHost) -> None:
    client = Recording()
    async with running(make_agent(host.root, client)) as agent:
        assert len(client.objects(GPUDevice)) == 4
        await asyncio.sleep(0.2)
        assert agent.passes == 1
        # The reset's own write of lastReset wakes nothing either: one pass for the change.
        await clean(client)
        await eventually(lambda: asyncio.sleep(0, device(client).spec.last_reset is not None))
        await asyncio.sleep(0.2)
        assert agent.passes == 2


async def test_rescans_of_an_unchanged_node_make_no_request(host: FakeHost) -> None:
    client = Recording()
    async with running(make_agent(host.root, client, interval=0.01)) as agent:
        await until(lambda: agent.passes >= 3)
        before, passes = len(client.calls), agent.passes
        await until(lambda: agent.passes >= passes + 10)
        assert client.calls[before:] == []
        # A rescan that finds a change writes it, and only it.
        host.remove(L40S_GPUS[3])
        await until(lambda: len(client.objects(GPUDevice)) == 3)
        await asyncio.sleep(0.05)
        assert client.calls[before:] == [("delete", "gpudevices")]
    assert ("watch", "gpudevices") in client.calls and ("watch", "gpuclasses") in client.calls


async def test_a_new_class_reaches_the_agent_through_its_watch(host: FakeHost) -> None:
    client = Recording()
    async with running(make_agent(host.root, client)) as agent:
        spec = GPUClassSpec(match=DeviceMatch(vendor_id="0x10de"), resource_name="l40s")
        await client.create(GPUClass(metadata=ObjectMeta(name="l40s"), spec=spec))
        await until(lambda: agent.classes is not None and "l40s" in agent.classes.store)
        await until(lambda: agent.passes >= 2)


async def test_without_watch_rights_the_agent_lists_at_every_pass(
    host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    client = NoWatch()
    agent = make_agent(host.root, client, interval=0.01)
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        await until(lambda: len(client.objects(GPUDevice)) == 4)
        await until(lambda: agent.passes >= 3)
        lists = client.calls.count(("list", "gpudevices"))
        await clean(client)
        await eventually(lambda: asyncio.sleep(0, device(client).spec.last_reset is not None))
        assert client.calls.count(("list", "gpudevices")) > lists
        assert agent.devices is not None and not agent.devices.live
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    warnings = [r for r in caplog.records if "watch of gpudevices failed" in r.getMessage()]
    assert len(warnings) == 1, "the same failure is said once"


# --- Watched ---------------------------------------------------------------------------


def labelled(name: str, node: str = NODE, **spec: Any) -> GPUDevice:
    meta = ObjectMeta(name=name, labels={NODE_LABEL: node})
    return GPUDevice(
        metadata=meta,
        spec=GPUDeviceSpec(node_name=node, pci_address="0000:3b:00.0", device_id="0x26b9", **spec),
    )


class Changes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


@asynccontextmanager
async def watching(
    client: MemoryClient, resync: float = 300
) -> AsyncIterator[tuple[Watched[GPUDevice], Changes]]:
    changes = Changes()
    watched = Watched(
        client,
        GPUDevice,
        changes,
        label_selector=f"{NODE_LABEL}={NODE}",
        keep=lambda d: d.spec.node_name == NODE,
        resync=resync,
    )
    task = asyncio.create_task(watched.run())
    try:
        await until(lambda: watched.live)
        yield watched, changes
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_store_follows_the_nodes_objects_only() -> None:
    client = MemoryClient()
    await client.create(labelled("a-1"))
    async with watching(client) as (watched, changes):
        assert list(watched.store) == ["a-1"] and changes.count == 0
        await client.create(labelled("b-1", node="node-b"))
        await client.create(labelled("a-2"))
        await until(lambda: "a-2" in watched.store)
        assert sorted(watched.store) == ["a-1", "a-2"] and changes.count == 1
        # Relabelled off the node (by hand): it leaves the store, as a DELETED event.
        a1 = await client.get(GPUDevice, "a-1")
        await client.update(
            a1.model_copy(
                update={
                    "metadata": a1.metadata.model_copy(update={"labels": {NODE_LABEL: "elsewhere"}})
                }
            )
        )
        await until(lambda: "a-1" not in watched.store)
        assert changes.count == 2


async def test_own_writes_are_expected_and_a_pass_waits_for_them() -> None:
    client = MemoryClient()
    async with watching(client) as (watched, changes):
        created = await client.create(labelled("a-1"))
        watched.expect("a-1", created)
        assert not watched.fresh
        assert await watched.wait_fresh(2)
        assert watched.store["a-1"].metadata.resource_version == created.metadata.resource_version
        assert changes.count == 0
        # Someone else's change of the same object is a change.
        await client.update_status(
            created.model_copy(update={"status": GPUDeviceStatus(phase=Phase.CLEANING)})
        )
        await until(lambda: changes.count == 1)


async def test_a_delete_held_by_a_finalizer_is_expected_too() -> None:
    client = MemoryClient()
    held = labelled("a-1")
    held = held.model_copy(
        update={"metadata": held.metadata.model_copy(update={"finalizers": [FINALIZER]})}
    )
    await client.create(held)
    async with watching(client) as (watched, changes):
        await client.delete(GPUDevice, "a-1")
        watched.expect("a-1", None)
        assert await watched.wait_fresh(2)
        assert watched.store["a-1"].metadata.deletion_timestamp is not None
        assert changes.count == 0


async def test_an_expected_write_the_watch_never_shows_is_given_up_on() -> None:
    client = MemoryClient()
    async with watching(client) as (watched, _):
        phantom = labelled("a-9").model_copy(
            update={"metadata": ObjectMeta(name="a-9", resource_version="999999")}
        )
        watched.expect("a-9", phantom)
        assert not await watched.wait_fresh(0.1)
        assert watched.fresh  # expectations dropped: the next pass lists, then trusts again


async def test_resync_lists_again_and_wakes_a_pass_only_on_a_difference() -> None:
    client = MemoryClient()
    await client.create(labelled("a-1"))
    async with watching(client, resync=0.05) as (watched, changes):
        await until(lambda: watched.lists >= 3)
        assert changes.count == 0
        # An event the watch missed: the next list finds the difference.
        watched.store.pop("a-1")
        await until(lambda: "a-1" in watched.store)
        assert changes.count == 1


async def test_an_expired_watch_lists_again() -> None:
    client = MemoryClient(history_limit=2)
    async with watching(client) as (watched, changes):
        lists = watched.lists
        watched.resource_version = "1"  # long gone from a history of two events
        for i in range(4):
            await client.create(labelled(f"a-{i}"))
        client.drop_watches()
        await until(lambda: watched.lists > lists and len(watched.store) == 4)
        assert changes.count >= 1


async def test_a_watch_that_keeps_failing_is_said_once_and_retried_ever_more_slowly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = NoWatch()
    watched = Watched(client, GPUDevice, Changes(), backoff=0.01, max_backoff=0.08)
    task = asyncio.create_task(watched.run())
    try:
        await asyncio.sleep(0.4)
        assert not watched.live
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    warnings = [r for r in caplog.records if "watch of gpudevices failed" in r.getMessage()]
    assert len(warnings) == 1
    # Each failure lists again after the wait: 0.01, 0.02, 0.04, then 0.08 at the most.
    assert client.calls.count(("list", "gpudevices")) <= 8
