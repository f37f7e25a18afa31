"""Simulated KubeVirt control plane: the VM controller (through admission) and the scheduler.

A VM with `running: true` and no VMI gets one named after it, owned by it, its GPU entries
copied from the template, created only if the injected admission (the webhook's decision)
allows; a denial is retried after a backoff, as KubeVirt retries a start. A pending VMI is
scheduled onto a Ready, uncordoned node its node affinity allows. Stopping deletes the
VMI; the kubelet then ends it and lets it go, but for the webhook's usage finalizer, which
keeps it until the binder has closed its usage records; its VM restarts once it is gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachine, VirtualMachineInstance
from gpu_binder.client.errors import AlreadyExists, NotFound
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.affinity import named_nodes, node_matches
from gpu_binder.sim.builders import vmi_for
from gpu_binder.sim.kubelet import VMI_FINALIZER, with_phase
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify, wire

# The webhook's decision: the VMI as admitted (patched), or the reason it was denied.
Admit = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | str]]

ENDED = ("Succeeded", "Failed")


class KubeVirtSim:
    """virt-controller and the scheduler, stepped by the driver.

    `admit` is called for every VMI creation; `restart_backoff` (virtual seconds, doubling
    up to `max_backoff`) delays the next start after a denial or a failed VMI.
    """

    def __init__(
        self,
        client: MemoryClient,
        clock: Callable[[], datetime],
        admit: Admit | None = None,
        *,
        restart_backoff: float = 10.0,
        max_backoff: float = 300.0,
    ) -> None:
        self.client = client
        self.clock = clock
        self.admit = admit
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self.created = 0
        self.denials: list[tuple[str, str]] = []
        self._vms: set[str] = set()
        self._not_before: dict[str, datetime] = {}
        self._failures: Counter[str] = Counter()
        self._unscheduled: set[str] = set()
        self._unschedulable: set[str] = set()
        self._placed: dict[str, str] = {}
        self._load: Counter[str] = Counter()
        self._node_shape: dict[str, tuple[bool, bool, tuple[tuple[str, str], ...]]] = {}
        for vm in client.objects(VirtualMachine):
            self._vms.add(vm.key)
        for vmi in client.objects(VirtualMachineInstance):
            self._on_vmi(vmi, deleted=False)
        client.subscribe(self._on_event)

    # --- what users do ------------------------------------------------------------------

    async def set_running(self, namespace: str, name: str, running: bool) -> None:
        """Start or stop a VM, as `virtctl start/stop` does."""

        def change(vm: VirtualMachine) -> VirtualMachine | None:
            if vm.running == running:
                return None
            raw = wire(vm)
            raw["spec"].pop("runStrategy", None)
            raw["spec"]["running"] = running
            return VirtualMachine.from_dict(raw)

        await modify(self.client, VirtualMachine, name, namespace, change)

    async def create_vmi(
        self, raw: dict[str, Any], *, admitted: bool = True
    ) -> VirtualMachineInstance | str:
        """Create a VMI through admission (or around it, as when the webhook is bypassed);
        returns the VMI or the denial message."""
        raw = {**raw, "metadata": {**raw.get("metadata", {})}}
        meta = raw["metadata"]
        meta["finalizers"] = sorted({*meta.get("finalizers", []), VMI_FINALIZER})
        if admitted and self.admit is not None:
            answer = await self.admit(raw)
            if isinstance(answer, str):
                self.denials.append((f"{meta.get('namespace')}/{meta.get('name')}", answer))
                return answer
            raw = answer
        vmi = await self.client.create(VirtualMachineInstance.from_dict(raw))
        self.created += 1
        return vmi

    # --- the controllers' work ------------------------------------------------------------

    async def step(self) -> int:
        """Start, stop and clean up VMIs of changed VMs, then schedule; returns writes made."""
        now = self.clock()
        for key, t in list(self._not_before.items()):
            if t <= now:
                del self._not_before[key]
                self._vms.add(key)
        writes = 0
        for key in sorted(self._vms):
            self._vms.discard(key)
            writes += await self._sync_vm(key, now)
        for key in sorted(self._unscheduled):
            self._unscheduled.discard(key)
            writes += await self._schedule(key, now)
        return writes

    async def _sync_vm(self, key: str, now: datetime) -> int:
        namespace, _, name = key.partition("/")
        vm = self.client.peek(VirtualMachine, name, namespace)
        if vm is None:
            self._failures.pop(key, None)
            return 0  # its VMI goes by garbage collection
        vmi = self.client.peek(VirtualMachineInstance, name, namespace)
        owned = vmi is not None and _owned_by(vmi, vm)
        if vmi is not None and vmi.being_deleted:
            return 0  # its DELETED event brings the VM back here
        if not vm.running:
            return await self._delete(vmi) if owned else 0
        if vmi is None:
            if key in self._not_before:
                return 0
            return await self._start(vm, now)
        if owned and vmi.phase in ENDED:
            if vmi.phase == "Failed":
                self._backoff(key, now)
            return await self._delete(vmi)
        return 0

    async def _start(self, vm: VirtualMachine, now: datetime) -> int:
        try:
            result = await self.create_vmi(vmi_for(vm))
        except AlreadyExists:
            return 0
        if isinstance(result, str):
            self._backoff(vm.key, now)
            return 0
        return 1

    def _backoff(self, key: str, now: datetime) -> None:
        self._failures[key] += 1
        delay = min(self.restart_backoff * 2 ** (self._failures[key] - 1), self.max_backoff)
        self._not_before[key] = now + timedelta(seconds=delay)

    async def _delete(self, vmi: VirtualMachineInstance | None) -> int:
        if vmi is None:
            return 0
        try:
            await self.client.delete(
                VirtualMachineInstance, vmi.metadata.name, vmi.metadata.namespace
            )
        except NotFound:
            return 0
        return 1

    async def _schedule(self, key: str, now: datetime) -> int:
        namespace, _, name = key.partition("/")
        vmi = self.client.peek(VirtualMachineInstance, name, namespace)
        if vmi is None or not _pending(vmi):
            return 0
        node = self._pick(vmi)
        if node is None:
            self._unschedulable.add(key)
            return 0

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != vmi.metadata.uid or not _pending(current):
                return None
            return with_phase(current, "Scheduled", now, node=node)

        written = await modify(
            self.client, VirtualMachineInstance, name, namespace, change, status=True
        )
        return 0 if written is None else 1

    def _pick(self, vmi: VirtualMachineInstance) -> str | None:
        """The least-loaded Ready, uncordoned node the VMI's affinity allows."""
        spec = vmi.raw.get("spec") or {}
        names = named_nodes(spec)
        if names is None:
            nodes = self.client.objects(Node)
        else:
            nodes = [n for x in sorted(names) if (n := self.client.peek(Node, x)) is not None]
        fit = [n.name for n in nodes if n.ready and not n.unschedulable and node_matches(spec, n)]
        return min(fit, key=lambda n: (self._load[n], n)) if fit else None

    # --- what the store tells the controllers ---------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is VirtualMachineInstance:
            self._on_vmi(event.object, deleted=event.type == "DELETED")
        elif kind is VirtualMachine:
            self._vms.add(event.object.key)
        elif kind is Node:
            self._on_node(event.object, deleted=event.type == "DELETED")

    def _on_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        key = vmi.key
        owner = vmi.vm_name
        if owner is not None:
            self._vms.add(f"{vmi.metadata.namespace}/{owner}")
            if vmi.phase == "Running":
                self._failures.pop(f"{vmi.metadata.namespace}/{owner}", None)
        placed = self._placed.pop(key, None)
        if placed is not None:
            self._load[placed] -= 1
        if deleted or not vmi.live:
            self._unscheduled.discard(key)
            self._unschedulable.discard(key)
            return
        if vmi.node_name:
            # A VMI being deleted still runs there until its guest has shut down.
            self._placed[key] = vmi.node_name
            self._load[vmi.node_name] += 1
        if _pending(vmi):
            self._unscheduled.add(key)
        else:
            self._unscheduled.discard(key)
            self._unschedulable.discard(key)

    def _on_node(self, node: Node, deleted: bool) -> None:
        shape = (node.ready, node.unschedulable, tuple(sorted(node.metadata.labels.items())))
        if deleted:
            self._node_shape.pop(node.name, None)
        elif self._node_shape.get(node.name) != shape:
            self._node_shape[node.name] = shape
            # A node that changed may now take the VMIs nothing could take before.
            self._unscheduled |= self._unschedulable
            self._unschedulable.clear()


def _pending(vmi: VirtualMachineInstance) -> bool:
    """Waiting for a node; a VMI being deleted is no longer scheduled anywhere."""
    return (
        vmi.live
        and not vmi.being_deleted
        and not vmi.node_name
        and vmi.phase in ("Pending", "Scheduling", "")
    )


def _owned_by(vmi: VirtualMachineInstance, vm: VirtualMachine) -> bool:
    owner = vmi.metadata.owner("VirtualMachine")
    return owner is not None and owner.uid == vm.metadata.uid
