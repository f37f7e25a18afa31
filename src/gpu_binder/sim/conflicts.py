"""Injected write conflicts: a concurrent writer that wins the race for an object."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# predicate(kind name, stored object) -> whether the write being made loses.
ConflictPredicate = Callable[[str, Any], bool]


class ConflictInjector:
    def __init__(self) -> None:
        self.predicate: ConflictPredicate | None = None
        self.injected = 0
        self._once: dict[tuple[str, str, str], int] = {}

    def once(self, kind: str, namespace: str, name: str) -> None:
        key = (kind, namespace, name)
        self._once[key] = self._once.get(key, 0) + 1

    def loses(self, kind: str, stored: Any) -> bool:
        """Whether this write loses; counts it when it does."""
        key = (kind, stored.metadata.namespace, stored.metadata.name)
        pending = self._once.get(key, 0)
        if pending:
            if pending == 1:
                del self._once[key]
            else:
                self._once[key] = pending - 1
        elif self.predicate is None or not self.predicate(kind, stored):
            return False
        self.injected += 1
        return True
