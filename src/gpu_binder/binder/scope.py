"""What a pass looks at: everything (a full sweep), or only what changed since the last pass.

Events touch order keys, nodes and devices as they arrive; an incremental pass takes
those and decides only about them. A full sweep runs on every resync, so a grace period
that ends with no event is noticed at most one resync late, as in the reference.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from gpu_binder.api.kubevirt import VirtualMachineInstance
from gpu_binder.binder.verdicts import Verdicts
from gpu_binder.cache.world import World


@dataclass
class Scope:
    full: bool
    keys: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    # The first pass of a binder: everything is new to it.
    initial: bool = False
    # A class changed: every key's decision may have, whatever it remembers.
    reclassed: bool = False

    @property
    def exhaustive(self) -> bool:
        """A sweep that trusts no step's memory of clean keys."""
        return self.full and (self.initial or self.reclassed)

    def sweep(self, every: Collection[str], clean: Verdicts) -> list[str]:
        """The keys of `every` a full sweep must decide about: those a step did not find
        clean last time (it wrote, or waits for a clock). A clean key's verdict holds
        until an event touches it, and the caller adds the changed keys, so a sweep costs
        what is pending, not the thousands of keys that did not change; only the first
        pass and a class change look at every key."""
        return sorted(self.swept(every, clean))

    def swept(self, every: Collection[str], clean: Verdicts) -> Collection[str]:
        """The keys `sweep` returns, unordered: for a caller that adds the changed keys and
        orders them once. At 50,000 devices an exhaustive sweep sorted every key twice per
        step (here and in _given), the part of it that grew faster than the keys."""
        if self.exhaustive:
            clean.restart(every)
            return every
        keys = clean.pending(every)
        clean.looked_at(keys)
        return keys

    def events_only(self) -> Scope:
        """For steps no clock can change (usage records): a sweep adds nothing past the
        first pass, so they look at changes even in a full sweep."""
        if not self.full or self.initial:
            return self
        return Scope(False, self.keys, self.nodes, self.devices)

    @classmethod
    def take(cls, world: World, full: bool) -> Scope:
        """The changes since the last pass; they are the world's no more."""
        d = world.devices
        scope = cls(full, d.touched_keys, d.touched_nodes, d.touched_devices)
        d.touched_keys, d.touched_nodes, d.touched_devices = set(), set(), set()
        if full:
            scope.reclassed = world.needs_full
            world.needs_full = False
        return scope

    def give_back(self, world: World) -> None:
        """An aborted pass decided nothing for sure: the next one looks again."""
        if self.full:
            world.needs_full = True
        d = world.devices
        d.touched_keys |= self.keys
        d.touched_nodes |= self.nodes
        d.touched_devices |= self.devices

    # Changes this pass made itself count too: a later step decides about what an earlier
    # step wrote (an attachment cleared, then its record closed).
    def changed_keys(self, world: World) -> set[str]:
        return self.keys | world.devices.touched_keys

    def changed_nodes(self, world: World) -> set[str]:
        return self.nodes | world.devices.touched_nodes

    def changed_devices(self, world: World) -> set[str]:
        return self.devices | world.devices.touched_devices

    def set_keys(self, world: World, clean: Verdicts | None = None) -> list[str]:
        """Order keys holding devices that this pass decides about."""
        by_vm = world.devices.by_vm
        if self.full and clean is None:
            return sorted(by_vm)
        if self.exhaustive and clean is not None:
            return self.sweep(by_vm, clean)
        keys = {k for k in self.changed_keys(world) if k in by_vm}
        if self.full and clean is not None:
            keys.update(self.swept(by_vm, clean))
        for node in self.changed_nodes(world):
            for name in world.devices.names_on(node):
                b = world.devices.by_name[name].status.binding
                if b is not None:
                    keys.add(b.vm.key)
        return _given(keys, clean, self.exhaustive)

    def vmis(self, world: World, clean: Verdicts | None = None) -> list[VirtualMachineInstance]:
        if self.full and clean is None:
            return sorted(world.vmis.values(), key=lambda v: v.key)
        keys: set[str] = set()
        if self.full and clean is not None:
            keys.update(self.swept(world.vmis, clean))
        for key in self.changed_keys(world):
            keys.update(world.vmis_by_order.get(key, ()))
        return [world.vmis[k] for k in _given(keys, clean, self.exhaustive)]

    def devices_of_interest(
        self, world: World, among: Collection[str], clean: Verdicts | None = None
    ) -> list[str]:
        """Names in `among` that changed, or whose order or node changed."""
        if self.full and clean is None:
            return sorted(among)
        candidates = set(self.changed_devices(world))
        if self.full and clean is not None:
            candidates.update(self.swept(among, clean))
        by_vm = world.devices.by_vm
        for key in self.changed_keys(world):
            candidates.update(by_vm.get(key, ()))
        for node in self.changed_nodes(world):
            candidates.update(world.devices.names_on(node))
        return _given({n for n in candidates if n in among}, clean, self.exhaustive)


def _given(keys: set[str], clean: Verdicts | None, restarted: bool = False) -> list[str]:
    """The keys a step is given, in order; with its verdicts, they are due until found clean
    (after an exhaustive sweep's restart every key not clean is due already: the keys
    given are keys of the sweep)."""
    out = sorted(keys)
    if clean is not None and not restarted:
        clean.looked_at(out)
    return out
