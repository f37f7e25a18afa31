"""What the agent reads from the API server, kept by list and watch instead of polling.

A `Watched` is an informer (gpu_binder.kube.cache) of one kind: its node's GPUDevices
through the node label, or every GPUClass, listed again every `resync` seconds as a
safety net. Every change the agent did not make itself calls `on_change`, which wakes a
pass, so a GPU entering Cleaning is reset at once rather than at the next rescan.

The agent's own writes are "expected" (a controller's expectations): the events they
cause wake nothing, and a pass reads the store only once it holds them, so it never
plans from a version older than the one it wrote. While the store cannot be trusted
(not listed yet, a watch failing, expectations overdue) `fresh` is false and the agent
lists instead, as it did before it watched.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gpu_binder.api.kinds import T
from gpu_binder.client.interface import Client, WatchEvent
from gpu_binder.kube.cache import Informer

log = logging.getLogger(__name__)

# A deletion the agent made: the next event of the object (DELETED, or MODIFIED with a
# deletionTimestamp while a finalizer holds it) is its own.
DELETION = ""


class Watched(Informer[T]):
    """The objects of one kind that `label_selector` and `keep` select, by list and watch."""

    def __init__(
        self,
        client: Client,
        kind: type[T],
        on_change: Callable[[], None],
        *,
        label_selector: str | None = None,
        keep: Callable[[T], bool] = lambda _: True,
        resync: float = 300.0,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        super().__init__(
            client,
            kind,
            self._changed,
            label_selector=label_selector,
            resync=resync,
            backoff=backoff,
            max_backoff=max_backoff,
        )
        self.on_change = on_change
        self.keep = keep
        # True from a list until a watch fails: the store follows the API server.
        self.live = False
        # name → the resourceVersion a write of the agent returned (DELETION for a delete).
        self._expected: dict[str, str] = {}
        self._caught_up = asyncio.Event()
        self._caught_up.set()
        self._last_error = ""

    @property
    def lists(self) -> int:
        return self.relists + 1 if self.synced.is_set() else 0

    def items(self) -> list[T]:
        return sorted(self.store.values(), key=lambda o: o.metadata.name)

    def selects(self, obj: T) -> bool:
        return self.keep(obj)

    @property
    def fresh(self) -> bool:
        """Whether a pass may read the store: live, and holding every write it expects."""
        return self.live and self._caught_up.is_set()

    def expect(self, name: str, written: T | None) -> None:
        """Note one write of the agent (None: a delete): its event is no change to react to."""
        if written is None:
            self._expected[name] = DELETION
        else:
            rv = written.metadata.resource_version
            held = self.store.get(name)
            if held is not None and held.metadata.resource_version == rv:
                return  # its event came first (or the write changed nothing)
            self._expected[name] = rv
        self._caught_up.clear()

    async def wait_fresh(self, timeout: float) -> bool:
        """Until the store holds the agent's writes; False when not live or overdue."""
        if not self.live:
            return False
        try:
            await asyncio.wait_for(self._caught_up.wait(), timeout)
        except TimeoutError:
            log.info(
                "%s: the watch has not shown %d of the agent's writes after %.0fs; listing",
                self.name,
                len(self._expected),
                timeout,
            )
            self._forget_expected()
            return False
        return self.live

    async def relist(self) -> None:
        await super().relist()
        # A list made after the agent's writes returned holds them (or what came after).
        self._forget_expected()
        self.live = True

    def _failed(self, error: Exception, delay: float) -> None:
        # Passes list for themselves until a fresh list (not a resumed watch) is had again.
        self.live = False
        self.resource_version = ""
        said = f"{type(error).__name__}: {getattr(error, 'message', None) or error}"
        # Said once, not at every retry of the same failure.
        again = self.failures > 1 and said == self._last_error
        log.log(
            logging.DEBUG if again else logging.WARNING,
            "watch of %s failed (%s); listing each pass meanwhile",
            self.name,
            said,
        )
        self._last_error = said

    def _changed(self, event: WatchEvent[Any]) -> None:
        # The first list tells nothing the agent's first pass does not read itself.
        if self.synced.is_set() and not self._own(event):
            self.on_change()

    def _own(self, event: WatchEvent[Any]) -> bool:
        meta = event.object.metadata
        expected = self._expected.get(meta.name)
        if expected is None:
            return False
        if expected == DELETION:
            own = event.type == "DELETED" or meta.deletion_timestamp is not None
        else:
            own = meta.resource_version == expected
        if own:
            del self._expected[meta.name]
            if not self._expected:
                self._caught_up.set()
        return own

    def _forget_expected(self) -> None:
        self._expected.clear()
        self._caught_up.set()
