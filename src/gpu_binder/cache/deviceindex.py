"""GPUDevices as the binder keeps them: by name, with the indexes a pass and placement read.

Every index follows each device as it is put or removed, so a pass never scans the
devices to find the free ones of a class on a node, a VM's set, or what changed.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Set as AbstractSet

from gpu_binder.api.slots import device_slot
from gpu_binder.api.types import FINALIZER, GPUDevice, Phase
from gpu_binder.cache.freestates import FreeStates
from gpu_binder.cache.resources import NodeResources
from gpu_binder.placement.mix import Pool, tally
from gpu_binder.placement.topology import domain_of

# The device condition naming the VMIs a drain of its cordoned node waits for (steps.drains).
DRAIN_BLOCKED = "DrainBlocked"


def is_free(d: GPUDevice) -> bool:
    """Free to bind: Available, schedulable, healthy and not being deleted."""
    return (
        d.status.phase == Phase.AVAILABLE
        and d.status.binding is None
        and not d.spec.unschedulable
        and d.spec.health == "Healthy"
        and d.metadata.deletion_timestamp is None
    )


class DeviceIndex:
    """GPUDevices by name with the indexes the pass reads."""

    def __init__(self) -> None:
        self.by_name: dict[str, GPUDevice] = {}
        self.by_vm: dict[str, set[str]] = defaultdict(set)
        self.by_node: dict[str, set[str]] = defaultdict(set)
        # free[class][node]: names of devices free to bind.
        self.free: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.missing_finalizer: set[str] = set()
        self.deleted: set[str] = set()
        self.lost: set[str] = set()
        self.cleaning: set[str] = set()
        self.attached: set[str] = set()
        # Bound with no attachment: reserved for their order (a Reserved record each).
        self.reserved: set[str] = set()
        self.unhealthy: set[str] = set()
        self.unclassified: set[str] = set()
        # Devices matching more than one class, shown on those classes' conditions.
        self.ambiguous: set[str] = set()
        # Devices carrying the DrainBlocked condition (steps.drains): it goes when the drain
        # no longer waits, which only a look at these finds.
        self.drain_flagged: set[str] = set()
        # slot resource name -> devices serving it, for the KubeVirt settings.
        self.slot_users: dict[str, int] = defaultdict(int)
        # Per node, the device serving each slot resource there: what a VMI's slot entry
        # names (cache.vmiorder).
        self.by_slot: dict[str, dict[str, GPUDevice]] = defaultdict(dict)
        # (tenant namespace, class, "bound" or "attached") -> devices: what each tenant
        # holds, for the metrics, without a scan of the devices per scrape.
        self.held: dict[tuple[str, str, str], int] = {}
        # Bumped whenever a device becomes free, so a failed order is retried only then.
        self.capacity_gen = 0
        # Per namespace, bumped whenever a device leaves one of its orders' sets: an order
        # its quota held back is retried only then (binder.quota).
        self.released_in: dict[str, int] = {}
        # Change counters per order key and per node: a step that found nothing to do for a
        # key skips it until something about the key changed.
        self.gen = 0
        self.key_gen: dict[str, int] = {}
        self.node_gen: dict[str, int] = {}
        # What changed since the last pass took them: an incremental pass looks only here.
        self.touched_keys: set[str] = set()
        self.touched_nodes: set[str] = set()
        self.touched_devices: set[str] = set()
        # Placement's indexes: CPU and memory per node (resources), nodes by free state per
        # class (freestates), free devices per class, and how many nodes hold n devices of
        # a class (its largest node size is what an order of a whole node needs).
        self.resources = NodeResources(self._resources_changed)
        self.states = FreeStates()
        self.free_count: dict[str, int] = defaultdict(int)
        self.class_nodes: dict[str, dict[str, int]] = defaultdict(dict)
        self.node_sizes: dict[str, dict[int, int]] = defaultdict(dict)
        # Bumped when a node's device count of a class or its CPU or memory changes.
        self.shape_gen = 0
        self._shapes: tuple[int, dict[str, frozenset[tuple[int, int, int]]]] | None = None
        # Free devices per pool: a class's nodes of one shape (the class's devices there,
        # node CPU, memory), and what each node adds to its pool (see _pool).
        self.pool_free: dict[Pool, int] = {}
        self._pooled: dict[tuple[str, str], tuple[Pool, int]] = {}

    def __len__(self) -> int:
        return len(self.by_name)

    def get(self, name: str) -> GPUDevice | None:
        return self.by_name.get(name)

    def put(self, d: GPUDevice) -> None:
        self.touched_devices.add(d.metadata.name)
        old = self.by_name.get(d.metadata.name)
        if old is not None:
            self._released(old, d)
            self._unindex(old)
        self.by_name[d.metadata.name] = d
        self._index(d)
        self._recount(old, d)
        # The node's free state and shape for the class, once both indexes are current.
        self._restate(d.status.class_name, d.spec.node_name)
        if old is not None and (old.status.class_name, old.spec.node_name) != (
            d.status.class_name,
            d.spec.node_name,
        ):
            self._restate(old.status.class_name, old.spec.node_name)

    def remove(self, name: str) -> None:
        self.touched_devices.add(name)
        old = self.by_name.pop(name, None)
        if old is not None:
            self._released(old, None)
            self._unindex(old)
            self._recount(old, None)
            self._restate(old.status.class_name, old.spec.node_name)

    def _released(self, old: GPUDevice, new: GPUDevice | None) -> None:
        was = old.status.binding
        now = new.status.binding if new is not None else None
        if was is not None and (now is None or now.vm.key != was.vm.key):
            ns = was.vm.namespace
            self.released_in[ns] = self.released_in.get(ns, 0) + 1

    def touch_key(self, key: str) -> None:
        # One string object per key in every index keyed by it (interned): a lookup then
        # matches by identity, not by comparing with a stored copy that is a cache miss
        # of its own, the cost of a 50,000-device sweep's per-key lookups.
        key = sys.intern(key)
        self.gen += 1
        self.key_gen[key] = self.gen
        self.touched_keys.add(key)

    def forget_key(self, key: str) -> None:
        """An order key gone from the cluster: its generation goes once no device is bound to
        it (touch_key gives it a new one, never used before, if it comes back)."""
        if not self.by_vm.get(key):
            self.key_gen.pop(key, None)

    def touch_node(self, node: str) -> None:
        self.gen += 1
        self.node_gen[node] = self.gen
        self.touched_nodes.add(node)

    def _index(self, d: GPUDevice) -> None:
        name, s = d.metadata.name, d.status
        self.by_node[d.spec.node_name].add(name)
        self.touch_node(d.spec.node_name)
        if s.binding is not None:
            self.by_vm[sys.intern(s.binding.vm.key)].add(name)
            self.touch_key(s.binding.vm.key)
            held = _held(d)
            self.held[held] = self.held.get(held, 0) + 1
        if is_free(d):
            self.free[s.class_name][d.spec.node_name].add(name)
            self.capacity_gen += 1
        self.counts[s.class_name][s.phase or ""] += 1
        if FINALIZER not in d.metadata.finalizers:
            self.missing_finalizer.add(name)
        if d.metadata.deletion_timestamp is not None:
            self.deleted.add(name)
        if s.phase == Phase.LOST:
            self.lost.add(name)
        if s.phase == Phase.CLEANING:
            self.cleaning.add(name)
        if s.attachment is not None:
            self.attached.add(name)
        elif s.binding is not None:
            self.reserved.add(name)
        if d.spec.health != "Healthy":
            self.unhealthy.add(name)
        if s.phase is None:
            self.unclassified.add(name)
        for c in s.conditions:
            if c.type == "Classified" and c.reason == "Ambiguous":
                self.ambiguous.add(name)
            elif c.type == DRAIN_BLOCKED:
                self.drain_flagged.add(name)
        slot = device_slot(d)
        if slot:
            self.slot_users[slot] += 1
            self.by_slot[d.spec.node_name][slot] = d
        self._placement_index(d, 1)

    def _unindex(self, d: GPUDevice) -> None:
        name, s = d.metadata.name, d.status
        discard_from(self.by_node, d.spec.node_name, name)
        self.touch_node(d.spec.node_name)
        if s.binding is not None:
            discard_from(self.by_vm, s.binding.vm.key, name)
            self.touch_key(s.binding.vm.key)
            held = _held(d)
            if self.held.get(held, 0) <= 1:
                self.held.pop(held, None)
            else:
                self.held[held] -= 1
        free = self.free.get(s.class_name)
        if free is not None:
            discard_from(free, d.spec.node_name, name)
        self.counts[s.class_name][s.phase or ""] -= 1
        for idx in (
            self.missing_finalizer,
            self.deleted,
            self.lost,
            self.cleaning,
            self.attached,
            self.reserved,
            self.unhealthy,
            self.unclassified,
            self.ambiguous,
            self.drain_flagged,
        ):
            idx.discard(name)
        slot = device_slot(d)
        if slot:
            self.slot_users[slot] -= 1
            if self.slot_users[slot] <= 0:
                del self.slot_users[slot]
            on_node = self.by_slot.get(d.spec.node_name)
            if on_node is not None and on_node.get(slot) is d:
                del on_node[slot]
                if not on_node:
                    del self.by_slot[d.spec.node_name]
        self._placement_index(d, -1)

    def _recount(self, old: GPUDevice | None, new: GPUDevice | None) -> None:
        """Devices per class per node, when a device comes, goes or changes either."""
        where = [(d.status.class_name, d.spec.node_name) for d in (old, new) if d is not None]
        if old is not None and new is not None and where[0] == where[1]:
            return
        for (c, node), sign in zip(where, (-1, 1) if old is not None else (1,), strict=False):
            per_node = self.class_nodes[c]
            was = per_node.get(node, 0)
            now = was + sign
            if now:
                per_node[node] = now
            else:
                per_node.pop(node, None)
            sizes = self.node_sizes[c]
            for size, step in ((was, -1), (now, 1)):
                if size:
                    n = sizes.get(size, 0) + step
                    if n:
                        sizes[size] = n
                    else:
                        sizes.pop(size, None)
        self.shape_gen += 1

    def shapes(self) -> dict[str, frozenset[tuple[int, int, int]]]:
        """Per class, the node shapes holding it: (its devices there, node CPU, memory)."""
        if self._shapes is not None and self._shapes[0] == self.shape_gen:
            return self._shapes[1]
        out: dict[str, frozenset[tuple[int, int, int]]] = {}
        for c, per_node in self.class_nodes.items():
            if c:
                out[c] = frozenset(
                    (n, *self.resources.allocatable_of(node)) for node, n in per_node.items()
                )
        self._shapes = (self.shape_gen, out)
        return out

    def _placement_index(self, d: GPUDevice, sign: int) -> None:
        s, node = d.status, d.spec.node_name
        c = s.class_name
        if is_free(d):
            self.free_count[c] += sign
        if s.binding is not None:
            if sign > 0:
                self.resources.add_device(s.binding.vm.key, node)
            else:
                self.resources.remove_device(s.binding.vm.key, node)

    def _restate(self, class_name: str, node: str) -> None:
        names = self.free.get(class_name, {}).get(node)
        self._pool(class_name, node, len(names) if names else 0)
        if not names:
            self.states.set(class_name, node, None)
            return
        cpu, memory = self.resources.free(node)
        self.states.set(class_name, node, (len(names), cpu, memory))

    def pool_of(self, class_name: str, node: str) -> Pool:
        """The node's pool for the class: the class, its devices there, node CPU, memory."""
        cpu, memory = self.resources.allocatable_of(node)
        return (class_name, self.class_nodes.get(class_name, {}).get(node, 0), cpu, memory)

    def _pool(self, class_name: str, node: str, free: int) -> None:
        """Move the node's free devices of the class to its current pool: every change of
        its free devices, device count or allocatable comes through _restate."""
        key = (class_name, node)
        old = self._pooled.pop(key, None)
        if old is not None:
            tally(self.pool_free, old[0], -old[1])
        if free:
            pool = self.pool_of(class_name, node)
            self._pooled[key] = (pool, free)
            tally(self.pool_free, pool, free)

    def _resources_changed(self, node: str, freed: bool, allocatable: bool = False) -> None:
        if allocatable:
            self.shape_gen += 1
        if freed:
            self.capacity_gen += 1  # an order that lacked CPU or memory may fit now
        for class_name, nodes in self.free.items():
            if node in nodes:
                self._restate(class_name, node)

    def whole(self, class_name: str) -> int:
        """The class's largest node size: how many of its devices one node holds at most."""
        return max(self.node_sizes.get(class_name, {}), default=0)

    def domain_sizes(
        self, class_name: str, node: str, topology: str, within: AbstractSet[str] | None = None
    ) -> dict[str, int]:
        """The class's devices on the node (of `within` only, if given) per topology domain."""
        sizes: dict[str, int] = {}
        for name in self.names_on(node):
            d = self.by_name[name]
            if d.status.class_name == class_name and (within is None or name in within):
                k = domain_of(d, topology)
                sizes[k] = sizes.get(k, 0) + 1
        return sizes

    def names_on(self, node: str) -> set[str]:
        return self.by_node.get(node, set())

    def set_of(self, vm_key: str) -> list[GPUDevice]:
        names = self.by_vm.get(vm_key)
        if not names:
            return []
        return [self.by_name[n] for n in sorted(names)]

    def free_on(self, class_name: str, node: str) -> set[str]:
        return self.free.get(class_name, {}).get(node, set())


def _held(d: GPUDevice) -> tuple[str, str, str]:
    b = d.status.binding
    assert b is not None
    return (b.vm.namespace, d.status.class_name, "attached" if d.status.attachment else "bound")


def set_node(devs: list[GPUDevice]) -> str:
    """The node a set lives on: where a live VMI uses it, else where most of it is."""
    for d in devs:
        if d.status.attachment is not None:
            return d.spec.node_name
    counts: dict[str, int] = {}
    for d in devs:
        counts[d.spec.node_name] = counts.get(d.spec.node_name, 0) + 1
    return min(counts, key=lambda n: (-counts[n], n))


def discard_from(index: dict[str, set[str]], key: str, name: str) -> None:
    names = index.get(key)
    if names is not None:
        names.discard(name)
        if not names:
            del index[key]
