"""The garbage collector's index: which objects each uid owns, and which uids exist."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from gpu_binder.api.meta import ObjectMeta

E = TypeVar("E", bound=Hashable)


class Owners(Generic[E]):
    """Dependents by owner uid; `order` sorts a removed owner's dependents so collection
    happens in the same order on every run."""

    def __init__(self, order: Callable[[E], Any]) -> None:
        self._order = order
        self._live: set[str] = set()
        self._dependents: dict[str, set[E]] = {}

    def follow(self, entry: E, before: ObjectMeta | None, after: ObjectMeta | None) -> None:
        """Record a write of entry: its existence and its ownerReferences."""
        if before is not None:
            self._live.discard(before.uid)
        if after is not None:
            self._live.add(after.uid)
        old = before.owner_references if before is not None else ()
        new = after.owner_references if after is not None else ()
        if old == new:
            return
        for ref in old:
            deps = self._dependents.get(ref.uid)
            if deps is not None:
                deps.discard(entry)
        for ref in new:
            self._dependents.setdefault(ref.uid, set()).add(entry)

    def orphans(self, owner_uid: str, meta_of: Callable[[E], ObjectMeta | None]) -> list[E]:
        """The dependents of a removed owner left with no owner that still exists and not
        yet being deleted: those the collector deletes now."""
        out = []
        for entry in sorted(self._dependents.pop(owner_uid, ()), key=self._order):
            meta = meta_of(entry)
            if meta is None or meta.deletion_timestamp is not None:
                continue
            if any(o.uid in self._live for o in meta.owner_references):
                continue
            out.append(entry)
        return out
