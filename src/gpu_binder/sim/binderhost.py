"""A binder process on the in-memory API: what every cluster in memory builds it from.

The sim's cluster and the binder's and webhook's test clusters run the real binder over a
MemoryClient. They share this: the client, the binder's config and clock, and the World its
informers would keep, fed every change through the one feed (cache.watched), listed afresh
when the binder restarts, and able to fall behind the API as a slow informer does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpu_binder.binder import Config, Reconciler, Recorder
from gpu_binder.cache import WATCHED, World, feed, fill
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.memory import MemoryClient

Shown = Callable[[WatchEvent[Any]], None]


class BinderHost:
    """`observing`: the World stamps with the clock what it sees (World.seen_running), as
    a running binder's does; `on_shown` is told of every event the World was shown."""

    def __init__(
        self,
        clock: Callable[[], datetime],
        config: Config | None = None,
        *,
        client: MemoryClient | None = None,
        seed: int = 0,
        observing: bool = True,
        on_shown: Shown | None = None,
    ) -> None:
        self.clock = clock
        self.config = config or Config()
        self.client = client if client is not None else MemoryClient(clock=clock, seed=seed)
        self._observing = observing
        self._on_shown = on_shown
        self._lagging: list[WatchEvent[Any]] | None = None
        self.world = self._listed()
        # Only the kinds a binder watches (the feed would drop the others).
        self.client.subscribe(self._event, WATCHED)

    def _listed(self) -> World:
        world = World(clock=self.clock if self._observing else None)
        fill(world, self.client.objects, self._namespace)
        return world

    @property
    def _namespace(self) -> str:
        # Where the binder watches KubeVirt's CR (cache.watched.namespace_of).
        return self.config.kubevirt_namespace

    def _event(self, _kind: type[Any], event: WatchEvent[Any]) -> None:
        if self._lagging is not None:
            self._lagging.append(event)
        else:
            self._show([event])

    def _show(self, events: list[WatchEvent[Any]]) -> None:
        for shown in feed(self.world, events, self._namespace):
            if self._on_shown is not None:
                self._on_shown(shown)

    def reconciler(
        self,
        recorder: Recorder | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> Reconciler:
        """The binder's reconciler on this world, with its config and clock (or `clock`)."""
        return Reconciler(
            self.client, self.world, self.config, clock=clock or self.clock, recorder=recorder
        )

    def restart(self, config: Config | None = None) -> World:
        """A new binder process (with `config`): a World listed afresh from the API, its
        informers caught up; returns it."""
        self.config = config or self.config
        self._lagging = None
        self.world = self._listed()
        return self.world

    def lag(self) -> None:
        """The binder's informers fall behind: events queue up until catch_up()."""
        self._lagging = []

    def catch_up(self) -> None:
        events, self._lagging = self._lagging or [], None
        self._show(events)
