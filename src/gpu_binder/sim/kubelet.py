"""The simulated kubelet and virt-handler: start scheduled VMIs, end them, record finish times.

A VMI starts only if every device resource its GPU entries name is free on its node
(served by the node's plugins and not held by another running VMI there); otherwise it
fails, so a broken pin shows up as a failed start rather than as the wrong GPU.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.builders import iso
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire

# The finalizer the simulated KubeVirt puts on its VMIs: a deleted VMI first shuts down.
VMI_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"


def with_phase(
    vmi: VirtualMachineInstance,
    phase: str,
    now: datetime,
    *,
    node: str | None = None,
    reason: str = "",
    message: str = "",
) -> VirtualMachineInstance:
    """vmi in a new phase, its transition time recorded as KubeVirt records it."""
    raw = wire(vmi)
    status = raw.setdefault("status", {})
    status["phase"] = phase
    if node is not None:
        status["nodeName"] = node
    if reason:
        status["reason"] = reason
        status["conditions"] = [
            {"type": "Ready", "status": "False", "reason": reason, "message": message}
        ]
    stamps = [t for t in status.get("phaseTransitionTimestamps") or [] if t.get("phase") != phase]
    stamps.append({"phase": phase, "phaseTransitionTimestamp": iso(now)})
    status["phaseTransitionTimestamps"] = stamps
    return VirtualMachineInstance.from_dict(raw)


class Kubelet:
    """Every node's kubelet and virt-handler, stepped by the driver."""

    def __init__(self, client: MemoryClient, clock: Callable[[], datetime]) -> None:
        self.client = client
        self.clock = clock
        self.started = 0
        self.failed_starts: list[tuple[str, str]] = []
        # Resources held by running VMIs: key -> (node, units per resource name).
        self._running: dict[str, tuple[str, Counter[str]]] = {}
        self._in_use: dict[str, Counter[str]] = {}
        self._to_start: set[str] = set()
        self._to_finish: set[str] = set()
        for vmi in client.objects(VirtualMachineInstance):
            self._on_vmi(vmi, deleted=False)
        client.subscribe(self._on_event)

    def in_use(self, node: str) -> Counter[str]:
        """Device units held on a node by its running VMIs."""
        return self._in_use.get(node, Counter())

    async def step(self) -> int:
        """Start what was scheduled, and shut down what was deleted; returns writes made."""
        writes = 0
        for key in sorted(self._to_finish):
            self._to_finish.discard(key)
            writes += await self._shut_down(key)
        for key in sorted(self._to_start):
            namespace, _, name = key.partition("/")
            vmi = self.client.peek(VirtualMachineInstance, name, namespace)
            if vmi is None or vmi.phase != "Scheduled" or not vmi.live:
                self._to_start.discard(key)
                continue
            node = self.client.peek(Node, vmi.node_name)
            if node is None or not node.ready:
                continue  # the kubelet there is down; the VMI waits as a pod would
            self._to_start.discard(key)
            writes += await self._start(vmi, node)
        return writes

    async def finish(
        self, namespace: str, name: str, phase: str = "Succeeded", reason: str = ""
    ) -> VirtualMachineInstance | None:
        """The guest ends on its own (shutdown, crash): the VMI goes Succeeded or Failed."""
        now = self.clock()

        def change(vmi: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if vmi.phase in ("Succeeded", "Failed"):
                return None
            return with_phase(vmi, phase, now, reason=reason, message=reason)

        return await modify(
            self.client, VirtualMachineInstance, name, namespace, change, status=True
        )

    async def fail_node(self, node: str, reason: str = "NodeUnresponsive") -> int:
        """Every live VMI on the node fails, as KubeVirt decides once a node is gone."""
        ended = 0
        for vmi in self.client.objects(VirtualMachineInstance):
            if vmi.node_name == node and vmi.phase not in ("Succeeded", "Failed"):
                ns, name = vmi.metadata.namespace, vmi.metadata.name
                if await self.finish(ns, name, "Failed", reason) is not None:
                    ended += 1
        return ended

    async def _start(self, vmi: VirtualMachineInstance, node: Node) -> int:
        wanted = Counter(vmi.device_names)
        used = self._in_use.get(node.name, Counter())
        short = sorted(r for r, n in wanted.items() if node.allocatable.get(r, 0) - used[r] < n)
        now = self.clock()
        if short:
            message = f"device resources not free on {node.name}: {', '.join(short)}"
            self.failed_starts.append((vmi.key, message))
            new = with_phase(vmi, "Failed", now, reason="UnexpectedAdmissionError", message=message)
        else:
            self.started += 1
            new = with_phase(vmi, "Running", now)
        written = await self._write_status(vmi, new)
        return 0 if written is None else 1

    async def _shut_down(self, key: str) -> int:
        namespace, _, name = key.partition("/")
        now = self.clock()
        writes = 0

        def end(vmi: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if vmi.phase in ("Succeeded", "Failed"):
                return None
            # A guest that never ran cannot have succeeded.
            return with_phase(vmi, "Succeeded" if vmi.phase == "Running" else "Failed", now)

        if await modify(self.client, VirtualMachineInstance, name, namespace, end, status=True):
            writes += 1

        def release(vmi: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if VMI_FINALIZER not in vmi.metadata.finalizers:
                return None
            raw = wire(vmi)
            rest = [f for f in vmi.metadata.finalizers if f != VMI_FINALIZER]
            raw["metadata"]["finalizers"] = rest
            return VirtualMachineInstance.from_dict(raw)

        if await modify(self.client, VirtualMachineInstance, name, namespace, release):
            writes += 1
        return writes

    async def _write_status(
        self, vmi: VirtualMachineInstance, new: VirtualMachineInstance
    ) -> VirtualMachineInstance | None:
        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != vmi.metadata.uid or current.phase != vmi.phase:
                return None  # it changed meanwhile; the event brings it back if still due
            raw = wire(new)
            raw["metadata"] = current.metadata.to_dict()
            return VirtualMachineInstance.from_dict(raw)

        return await modify(
            self.client,
            VirtualMachineInstance,
            vmi.metadata.name,
            vmi.metadata.namespace,
            change,
            status=True,
        )

    # --- what the store tells the kubelet -------------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is VirtualMachineInstance:
            self._on_vmi(event.object, deleted=event.type == "DELETED")

    def _on_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        key = vmi.key
        held = self._running.pop(key, None)
        if held is not None:
            self._in_use[held[0]].subtract(held[1])
        if deleted:
            self._to_start.discard(key)
            self._to_finish.discard(key)
            return
        if vmi.metadata.deletion_timestamp is not None:
            self._to_start.discard(key)
            if VMI_FINALIZER in vmi.metadata.finalizers:
                self._to_finish.add(key)
        elif vmi.phase == "Scheduled" and vmi.node_name:
            self._to_start.add(key)
        # A deleted VMI holds its devices until its guest has stopped.
        if vmi.phase == "Running" and vmi.node_name:
            units = Counter(vmi.device_names)
            self._running[key] = (vmi.node_name, units)
            self._in_use.setdefault(vmi.node_name, Counter()).update(units)
