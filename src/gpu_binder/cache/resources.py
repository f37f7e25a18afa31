"""Node CPU and memory: what a node offers, what the VMs bound there ask, what is free.

A binding reserves a node for a VM: its GPUs, and so also the CPU and memory it will
need there, or the scheduler could never start it. A VM counts on a node while it holds
a device there, with what it asks for (VirtualMachine.cpu_milli / memory_bytes); the sums
are kept as bindings and VMs change, never recomputed per pass.
"""

from __future__ import annotations

from collections.abc import Callable

from gpu_binder.placement.mix import UNLIMITED

Amount = tuple[int, int]  # (CPU millicores, memory bytes)


class NodeResources:
    """Allocatable and used CPU and memory per node; `changed(node, freed)` on every change."""

    def __init__(self, changed: Callable[..., None] | None = None) -> None:
        # changed(node, freed, allocatable=False): freed when more is free than before.
        self.changed = changed or (lambda *_args, **_kw: None)
        self.allocatable: dict[str, tuple[int | None, int | None]] = {}
        self.requests: dict[str, Amount] = {}
        # Devices an order holds per node, and what it was counted with there.
        self.held: dict[str, dict[str, int]] = {}
        self.counted: dict[tuple[str, str], Amount] = {}
        self.used: dict[str, Amount] = {}
        # Orders that are gone but still hold devices: forgotten when the last one goes.
        self.gone: set[str] = set()

    def free(self, node: str) -> Amount:
        """What is free on the node; UNLIMITED for what it does not report."""
        cpu, memory = self.allocatable.get(node, (None, None))
        used_cpu, used_memory = self.used.get(node, (0, 0))
        return (
            UNLIMITED if cpu is None else cpu - used_cpu,
            UNLIMITED if memory is None else memory - used_memory,
        )

    def allocatable_of(self, node: str) -> Amount:
        """What the node offers in all; UNLIMITED for what it does not report."""
        cpu, memory = self.allocatable.get(node, (None, None))
        return (UNLIMITED if cpu is None else cpu, UNLIMITED if memory is None else memory)

    def request(self, key: str) -> Amount:
        return self.requests.get(key, (0, 0))

    def holds(self, key: str, node: str) -> bool:
        """The order already counts on this node: completing its set there needs no more."""
        return node in self.held.get(key, {})

    # --- feeding ----------------------------------------------------------------------

    def set_allocatable(self, node: str, cpu: int | None, memory: int | None) -> None:
        old = self.allocatable.get(node, (None, None))
        if old == (cpu, memory):
            return
        if cpu is None and memory is None:
            self.allocatable.pop(node, None)
        else:
            self.allocatable[node] = (cpu, memory)
        self.changed(node, _more(old[0], cpu) or _more(old[1], memory), allocatable=True)

    def set_request(self, key: str, amount: Amount) -> None:
        """What the order asks for now; the nodes it counts on are counted again."""
        self.gone.discard(key)
        if self.requests.get(key, (0, 0)) == amount:
            return
        if amount == (0, 0) and key not in self.held:
            self.requests.pop(key, None)
        else:
            self.requests[key] = amount
        for node in self.held.get(key, {}):
            old = self.counted[(key, node)]
            self._count(node, amount[0] - old[0], amount[1] - old[1])
            self.counted[(key, node)] = amount
            self.changed(node, amount[0] < old[0] or amount[1] < old[1])

    def forget_request(self, key: str) -> None:
        """The order is gone; it still counts wherever it holds devices until they go."""
        if key in self.held:
            self.gone.add(key)
        else:
            self.requests.pop(key, None)

    def add_device(self, key: str, node: str) -> None:
        nodes = self.held.setdefault(key, {})
        nodes[node] = nodes.get(node, 0) + 1
        if nodes[node] == 1:
            amount = self.request(key)
            self.counted[(key, node)] = amount
            self._count(node, *amount)
            if amount != (0, 0):
                self.changed(node, False)

    def remove_device(self, key: str, node: str) -> None:
        nodes = self.held.get(key)
        if nodes is None or node not in nodes:
            return
        nodes[node] -= 1
        if nodes[node] > 0:
            return
        del nodes[node]
        if not nodes:
            del self.held[key]
            if key in self.gone:
                self.gone.discard(key)
                self.requests.pop(key, None)
        cpu, memory = self.counted.pop((key, node))
        self._count(node, -cpu, -memory)
        if (cpu, memory) != (0, 0):
            self.changed(node, True)

    def _count(self, node: str, cpu: int, memory: int) -> None:
        used_cpu, used_memory = self.used.get(node, (0, 0))
        used = (used_cpu + cpu, used_memory + memory)
        if used == (0, 0):
            self.used.pop(node, None)
        else:
            self.used[node] = used


def _more(old: int | None, new: int | None) -> bool:
    """Does the node offer more than before (None: no limit)?"""
    if new is None:
        return old is not None
    return old is not None and new > old
