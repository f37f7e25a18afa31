"""Read-modify-write with retry on conflict, as every Kubernetes controller writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson

from gpu_binder.api.kinds import T
from gpu_binder.client.errors import Conflict, NotFound
from gpu_binder.sim.memory import MemoryClient

ATTEMPTS = 5


def wire(obj: Any) -> dict[str, Any]:
    """A deep copy of obj's wire form, safe to change: stored objects share their dicts."""
    return cast(dict[str, Any], orjson.loads(orjson.dumps(obj.to_dict())))


async def modify(
    client: MemoryClient,
    kind: type[T],
    name: str,
    namespace: str,
    change: Callable[[T], T | None],
    *,
    status: bool = False,
) -> T | None:
    """Apply change to the current object and write it, again on a conflict.

    change returns the new object, or None when nothing needs writing. Returns what was
    written, or None when the object is gone or nothing changed.
    """
    for _ in range(ATTEMPTS):
        current = client.peek(kind, name, namespace)
        if current is None:
            return None
        new = change(current)
        if new is None:
            return None
        try:
            if status:
                return await client.update_status(new)
            return await client.update(new)
        except Conflict:
            continue
        except NotFound:
            return None
    raise Conflict(f"{name}: still conflicting after {ATTEMPTS} attempts")
