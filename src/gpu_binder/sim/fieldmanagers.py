"""Who writes, as the API server's managedFields tell it: each simulated component writes
as its own field manager, and the store stamps the entries as kube-apiserver does.

A stand-in for k8s.io/apimachinery pkg/util/managedfields/internal/managedfieldsupdater.go
(Update): a write that changes the object sets its manager's entry time to the server's
now (a metav1.Time: to the second) and gives that manager every field it changed. Only
the ownership of status.phase is kept, the one field the binder reads an entry for
(api.kubevirt.VirtualMachineInstance.finish); every other entry lists no fields. Only
VMIs carry them, the one kind the binder reads them on: the store's write path is the
sim's hottest code, and entries nobody reads would cost every write of every kind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import wraps
from typing import Any, Concatenate, ParamSpec, TypeVar

from gpu_binder.sim.builders import iso

# The kinds whose objects carry managedFields in the sim.
MANAGED_KINDS = frozenset({"VirtualMachineInstance"})
# The manager of the writes made now: a component sets it around its work (writing_as).
_MANAGER: ContextVar[str] = ContextVar("field_manager", default="sim")
_PHASE: dict[str, Any] = {"f:status": {"f:phase": {}}}

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")


@asynccontextmanager
async def writing_as(manager: str) -> AsyncIterator[None]:
    """The writes made inside are `manager`'s, also those of coroutines it awaits."""
    token = _MANAGER.set(manager)
    try:
        yield
    finally:
        _MANAGER.reset(token)


Method = Callable[Concatenate[S, P], Coroutine[Any, Any, R]]


def writes_as(manager: str) -> Callable[[Method[S, P, R]], Method[S, P, R]]:
    """A component's method whose writes are `manager`'s."""

    def decorate(method: Method[S, P, R]) -> Method[S, P, R]:
        @wraps(method)
        async def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
            # The context variable set and reset in place: every component step of the sim
            # comes through here, and an async context manager costs several times as much.
            token = _MANAGER.set(manager)
            try:
                return await method(self, *args, **kwargs)
            finally:
                _MANAGER.reset(token)

        return wrapper

    return decorate


def entries_of(obj: Any) -> list[dict[str, Any]] | None:
    """The managedFields of a stored object (None: it has none, or is no wire body)."""
    raw = getattr(obj, "raw", None)
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    found = meta.get("managedFields") if isinstance(meta, dict) else None
    return found if isinstance(found, list) else None


def carried(raw: dict[str, Any], stored: Any, now: datetime | None) -> dict[str, Any]:
    """raw, the body of a new version of stored, with its managedFields: the stored
    object's, and when `now` is given (a create or an update: the write changes the
    object if it is committed at all) its manager's entry stamped now, owning the phase
    when the write changed it. The request's own managedFields are not read."""
    before = entries_of(stored)
    entries = _stamped(before or [], now, _phase(stored) != _phase(raw)) if now else before
    meta = raw.get("metadata")
    if entries is None or not isinstance(meta, dict):
        return raw
    raw["metadata"] = {**meta, "managedFields": entries}
    return raw


def _stamped(entries: list[dict[str, Any]], now: datetime, phase: bool) -> list[dict[str, Any]]:
    manager = _MANAGER.get()
    out: list[dict[str, Any]] = []
    fields: dict[str, Any] = dict(_PHASE) if phase else {}
    for e in entries:
        if e.get("manager") == manager:
            fields = fields or e.get("fieldsV1") or {}
        elif phase and e.get("fieldsV1"):
            out.append({**e, "fieldsV1": {}})  # the phase changed hands
        else:
            out.append(e)
    out.append(
        {
            "manager": manager,
            "operation": "Update",
            "time": iso(now),
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    )
    return out


def _phase(obj: Any) -> Any:
    raw = obj if isinstance(obj, dict) else getattr(obj, "raw", None)
    status = raw.get("status") if isinstance(raw, dict) else None
    return status.get("phase") if isinstance(status, dict) else None
