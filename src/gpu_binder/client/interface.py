"""The client interface: the API's verbs over typed objects.

Both the in-memory cluster (gpu_binder.sim.memory) and the real API server client
(gpu_binder.kube) implement it, so the binder, webhook and agent run unchanged on either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol

from gpu_binder.api.kinds import KubeObject, T

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


@dataclass(frozen=True, slots=True)
class WatchEvent(Generic[T]):
    type: EventType
    object: T


@dataclass(frozen=True, slots=True)
class ListResult(Generic[T]):
    items: list[T]
    # The list's resourceVersion: a watch from it misses nothing.
    resource_version: str


class Client(Protocol):
    """The verbs of the Kubernetes API. Errors are gpu_binder.client.errors types."""

    async def get(self, kind: type[T], name: str, namespace: str = "") -> T: ...

    async def list(
        self,
        kind: type[T],
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> ListResult[T]: ...

    def watch(
        self,
        kind: type[T],
        namespace: str | None = None,
        resource_version: str | None = None,
        label_selector: str | None = None,
    ) -> AsyncIterator[WatchEvent[T]]:
        """Events after resource_version; raises Gone when it is too old to resume from.

        Without resource_version the stream starts with an ADDED event for every current
        object. With label_selector it carries only the objects the selector matches: one
        that starts matching arrives as ADDED, one that stops matching as DELETED.
        """
        ...

    async def create(self, obj: T, dry_run: bool = False) -> T: ...

    async def update(self, obj: T) -> T:
        """Write metadata and spec; Conflict when obj's resourceVersion is stale."""
        ...

    async def update_status(self, obj: T) -> T:
        """Write the status subresource; Conflict when obj's resourceVersion is stale."""
        ...

    async def patch(self, kind: type[T], name: str, namespace: str, patch: dict[str, Any]) -> T:
        """A JSON merge patch (RFC 7386) of the object."""
        ...

    async def set_condition(
        self, kind: type[T], name: str, namespace: str, condition: dict[str, Any]
    ) -> T:
        """Set one condition of status.conditions, by its type, and nothing else: a strategic
        merge patch of the status subresource of a built-in kind (a Node), which merges
        conditions by type. No read first, no resourceVersion: it touches one condition."""
        ...

    async def apply(
        self, kind: type[T], obj: dict[str, Any], field_manager: str = "gpu-binder"
    ) -> T:
        """Server-side apply of obj with the given field manager, forcing conflicts."""
        ...

    async def delete(self, kind: type[T], name: str, namespace: str = "") -> None: ...


__all__ = ["Client", "EventType", "KubeObject", "ListResult", "WatchEvent"]
