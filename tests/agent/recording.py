"""An in-memory API server that notes each request as RBAC sees it: (verb, resource)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gpu_binder.api.kinds import T, resource_of
from gpu_binder.client.interface import ListResult, WatchEvent
from gpu_binder.sim.memory import MemoryClient


class Recording(MemoryClient):
    def __init__(self) -> None:
        super().__init__()
        # In order, e.g. ("update", "gpudevices/status"): what an audit log would show.
        self.calls: list[tuple[str, str]] = []

    @property
    def requests(self) -> set[tuple[str, str]]:
        return set(self.calls)

    def note(self, verb: str, kind: type[Any], sub: str = "") -> None:
        plural = resource_of(kind).plural
        self.calls.append((verb, f"{plural}/{sub}" if sub else plural))

    async def get(self, kind: type[T], name: str, namespace: str = "") -> T:
        self.note("get", kind)
        return await super().get(kind, name, namespace)

    async def list(self, kind: type[T], *args: Any, **kwargs: Any) -> ListResult[T]:
        self.note("list", kind)
        return await super().list(kind, *args, **kwargs)

    def watch(self, kind: type[T], *args: Any, **kwargs: Any) -> AsyncIterator[WatchEvent[T]]:
        self.note("watch", kind)
        return super().watch(kind, *args, **kwargs)

    async def create(self, obj: T, dry_run: bool = False) -> T:
        self.note("create", type(obj))
        return await super().create(obj, dry_run)

    async def update(self, obj: T) -> T:
        self.note("update", type(obj))
        return await super().update(obj)

    async def update_status(self, obj: T) -> T:
        self.note("update", type(obj), "status")
        return await super().update_status(obj)

    async def patch(self, kind: type[T], name: str, namespace: str, patch: dict[str, Any]) -> T:
        self.note("patch", kind)
        return await super().patch(kind, name, namespace, patch)

    async def delete(self, kind: type[T], name: str, namespace: str = "") -> None:
        self.note("delete", kind)
        await super().delete(kind, name, namespace)
