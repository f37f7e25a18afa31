"""Informers on the in-memory API server: label selection, narrowing, resync and backoff."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from gpu_binder.api.kinds import T
from gpu_binder.api.meta import ObjectMeta
from gpu_binder.api.types import GPUDevice, GPUDeviceSpec
from gpu_binder.client.errors import Forbidden
from gpu_binder.client.interface import ListResult, WatchEvent
from gpu_binder.kube.cache import Informer
from gpu_binder.sim.memory import MemoryClient

LABEL = "gpu.cozystack.io/node"
HERE = f"{LABEL}=here"
Seen = list[tuple[str, str]]


def gpu(name: str, node: str = "here", slot: int = 0) -> GPUDevice:
    return GPUDevice(
        metadata=ObjectMeta(name=name, labels={LABEL: node}),
        spec=GPUDeviceSpec(
            node_name=node, pci_address="0000:3b:00.0", device_id="0x2330", slot=slot
        ),
    )


def relabelled(d: GPUDevice, node: str) -> GPUDevice:
    return d.model_copy(
        update={"metadata": d.metadata.model_copy(update={"labels": {LABEL: node}})}
    )


class Counting(MemoryClient):
    """Counts lists; while `refuse_watch` is set, every watch is forbidden."""

    def __init__(self, refuse_watch: bool = False) -> None:
        super().__init__()
        self.lists = 0
        self.refuse_watch = refuse_watch

    async def list(self, kind: type[T], *args: Any, **kwargs: Any) -> ListResult[T]:
        self.lists += 1
        return await super().list(kind, *args, **kwargs)

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent[T]]:
        if not self.refuse_watch:
            return super().watch(kind, *args, **kwargs)

        async def refused() -> AsyncIterator[WatchEvent[T]]:
            raise Forbidden("gpudevices is forbidden: cannot watch")
            yield

        return refused()


class Retries(Informer[GPUDevice]):
    """An informer that notes the delay before each retry."""

    def __init__(self, client: MemoryClient, **options: Any) -> None:
        super().__init__(client, GPUDevice, lambda _: None, **options)
        self.delays: list[float] = []

    def _failed(self, error: Exception, delay: float) -> None:
        self.delays.append(delay)


class FirstSlot(Informer[GPUDevice]):
    """An informer narrower than its label selector: the devices in slot 0."""

    def selects(self, obj: GPUDevice) -> bool:
        return obj.spec.slot == 0


async def until(done: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not done():
            await asyncio.sleep(0.01)


@asynccontextmanager
async def running(informer: Informer[Any]) -> AsyncIterator[None]:
    task = asyncio.create_task(informer.run())
    try:
        await until(informer.synced.is_set)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def noting(seen: Seen) -> Callable[[WatchEvent[Any]], None]:
    return lambda event: seen.append((event.type, event.object.metadata.name))


def selected(client: MemoryClient, seen: Seen, **options: Any) -> Informer[GPUDevice]:
    return Informer(client, GPUDevice, noting(seen), label_selector=HERE, **options)


async def test_a_label_selected_informer_holds_only_the_selection() -> None:
    client, seen = MemoryClient(), Seen()
    await client.create(gpu("a"))
    await client.create(gpu("b", node="there"))
    informer = selected(client, seen)
    async with running(informer):
        await client.create(gpu("c"))
        await client.create(gpu("d", node="there"))
        await until(lambda: "c" in informer.store)
        await asyncio.sleep(0.05)
    assert sorted(informer.store) == ["a", "c"]
    assert seen == [("ADDED", "a"), ("ADDED", "c")]


async def test_an_object_relabelled_out_of_the_selection_is_handed_on_as_deleted() -> None:
    client, seen = MemoryClient(), Seen()
    a = await client.create(gpu("a"))
    informer = selected(client, seen)
    async with running(informer):
        await client.update(relabelled(a, "there"))
        await until(lambda: "a" not in informer.store)
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


async def test_an_object_relabelled_into_the_selection_is_handed_on_as_added() -> None:
    client, seen = MemoryClient(), Seen()
    b = await client.create(gpu("b", node="there"))
    informer = selected(client, seen)
    async with running(informer):
        await client.update(relabelled(b, "here"))
        await until(lambda: "b" in informer.store)
    assert seen == [("ADDED", "b")]


async def test_an_object_a_narrower_informer_stops_selecting_is_handed_on_as_deleted() -> None:
    client, seen = MemoryClient(), Seen()
    a = await client.create(gpu("a"))
    informer = FirstSlot(client, GPUDevice, noting(seen))
    async with running(informer):
        await client.update(a.model_copy(update={"spec": a.spec.model_copy(update={"slot": 1})}))
        await until(lambda: "a" not in informer.store)
    assert seen == [("ADDED", "a"), ("DELETED", "a")]


async def test_an_object_a_narrower_informer_never_selected_is_never_handed_on() -> None:
    client, seen = MemoryClient(), Seen()
    informer = FirstSlot(client, GPUDevice, noting(seen))
    async with running(informer):
        await client.create(gpu("b", slot=1))
        await client.delete(GPUDevice, "b")
        await client.create(gpu("c"))
        await until(lambda: "c" in informer.store)
    assert seen == [("ADDED", "c")]


async def test_a_periodic_resync_relists_and_hands_on_the_difference() -> None:
    client, seen = MemoryClient(), Seen()
    await client.create(gpu("a"))
    informer = selected(client, seen, resync=0.05)
    async with running(informer):
        await until(lambda: informer.relists >= 2)
        assert seen == [("ADDED", "a")], "an unchanged list hands on nothing"
        informer.store.pop("a")  # as if the watch had missed its event
        await until(lambda: "a" in informer.store)
    assert seen == [("ADDED", "a"), ("ADDED", "a")]


async def test_without_resync_an_informer_lists_once_while_its_watch_holds() -> None:
    client = Counting()
    informer = Informer(client, GPUDevice, lambda _: None)
    async with running(informer):
        await client.create(gpu("a"))
        await until(lambda: "a" in informer.store)
        await asyncio.sleep(0.2)
    assert (client.lists, informer.relists) == (1, 0)


async def test_a_failing_watch_retries_twice_as_late_each_time_up_to_the_maximum() -> None:
    client = Counting(refuse_watch=True)
    informer = Retries(client, backoff=0.01, max_backoff=0.04)
    async with running(informer):
        await until(lambda: len(informer.delays) >= 5)
    assert informer.delays[:5] == [0.01, 0.02, 0.04, 0.04, 0.04]
    assert client.lists == 1, "a failed watch resumes; it does not list again"


async def test_a_watch_that_ran_its_course_ends_the_backoff() -> None:
    client = Counting(refuse_watch=True)
    informer = Retries(client, backoff=0.01, max_backoff=1.0)
    async with running(informer):
        await until(lambda: len(informer.delays) >= 3)
        client.refuse_watch = False
        await client.create(gpu("a"))
        await until(lambda: "a" in informer.store)
        before = len(informer.delays)
        client.refuse_watch = True
        client.drop_watches()  # the server ends the watch that works; the next fails
        await until(lambda: len(informer.delays) > before)
    assert informer.delays[:3] == [0.01, 0.02, 0.04]
    assert informer.delays[before] == 0.01
