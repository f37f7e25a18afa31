"""virt-handler on every node: it runs the domain of a VMI its launcher pod got the node
for, shuts it down when the VMI is deleted, and writes the phases it owns (Running,
Succeeded, Failed) with its node's clock (kubevirt/kubevirt `pkg/virt-handler/vm.go`;
the timestamps by `SetVMIPhaseTransitionTimestamp`).

virt-controller hands a VMI over in phase Scheduled, with `status.nodeName` its launcher
pod's node, once that pod is ready; the guest then runs with the devices the kubelet gave
the pod. A virt-handler whose node is not Ready does nothing until it is again.
"""

from __future__ import annotations

from typing import Any

from gpu_binder.api.kubevirt import Node, VirtualMachineInstance
from gpu_binder.client.interface import WatchEvent
from gpu_binder.sim.clocks import CONTROLLER, Clocks
from gpu_binder.sim.fieldmanagers import writes_as
from gpu_binder.sim.memory import MemoryClient
from gpu_binder.sim.retry import modify
from gpu_binder.sim.vmistatus import with_phase

ENDED = ("Succeeded", "Failed")


class VirtHandler:
    def __init__(self, client: MemoryClient, clocks: Clocks) -> None:
        self.client = client
        self.clocks = clocks
        # VMIs whose domain started (phase Running), and those ended before they ran.
        self.started = 0
        self.ended_early = 0
        self._to_start: set[str] = set()
        self._to_stop: set[str] = set()
        for vmi in client.objects(VirtualMachineInstance):
            self._on_vmi(vmi, deleted=False)
        client.subscribe(self._on_event, (VirtualMachineInstance,))

    @writes_as("virt-handler")
    async def step(self) -> int:
        writes = 0
        for key in sorted(self._to_stop):
            vmi = self._vmi(key)
            if vmi is None or vmi.phase in ENDED:
                self._to_stop.discard(key)
                continue
            if not self._node_up(vmi.node_name):
                continue  # the guest runs on; its virt-handler reports once it is back
            self._to_stop.discard(key)
            self._to_start.discard(key)
            # A guest that never ran cannot have succeeded.
            phase = "Succeeded" if vmi.phase == "Running" else "Failed"
            writes += await self._write(vmi, phase)
        for key in sorted(self._to_start):
            vmi = self._vmi(key)
            if vmi is None or vmi.phase != "Scheduled" or vmi.being_deleted:
                self._to_start.discard(key)
                continue
            if not self._node_up(vmi.node_name):
                continue
            self._to_start.discard(key)
            if await self._write(vmi, "Running"):
                self.started += 1
                writes += 1
        return writes

    @writes_as("virt-handler")
    async def finish(
        self, namespace: str, name: str, phase: str = "Succeeded", reason: str = ""
    ) -> VirtualMachineInstance | None:
        """The guest ends on its own (a shutdown inside it, a crash): virt-handler reports
        the VMI Succeeded or Failed, by its node's clock."""
        vmi = self.client.peek(VirtualMachineInstance, name, namespace)
        if vmi is None or vmi.phase in ENDED:
            return None
        now = self.clocks.now(vmi.node_name or CONTROLLER)

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.phase in ENDED:
                return None
            return with_phase(current, phase, now, reason=reason, message=reason)

        return await modify(
            self.client, VirtualMachineInstance, name, namespace, change, status=True
        )

    @writes_as("virt-controller")
    async def fail_node(self, node: str, reason: str = "NodeUnresponsive") -> int:
        """Every live VMI on the node fails, as virt-controller decides once its
        virt-handler stopped reporting (pkg/virt-controller/watch/node/node.go), by
        virt-controller's clock."""
        ended = 0
        now = self.clocks.now(CONTROLLER)
        for vmi in self.client.objects(VirtualMachineInstance):
            if vmi.node_name != node or vmi.phase in ENDED:
                continue

            def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
                if current.phase in ENDED:
                    return None
                return with_phase(current, "Failed", now, reason=reason, message=reason)

            ns, name = vmi.metadata.namespace, vmi.metadata.name
            if await modify(self.client, VirtualMachineInstance, name, ns, change, status=True):
                ended += 1
        return ended

    def _node_up(self, node: str) -> bool:
        found = self.client.peek(Node, node) if node else None
        return found is not None and found.ready

    def _vmi(self, key: str) -> VirtualMachineInstance | None:
        namespace, _, name = key.partition("/")
        return self.client.peek(VirtualMachineInstance, name, namespace)

    async def _write(self, vmi: VirtualMachineInstance, phase: str) -> int:
        uid, before = vmi.metadata.uid, vmi.phase
        now = self.clocks.now(vmi.node_name)

        def change(current: VirtualMachineInstance) -> VirtualMachineInstance | None:
            if current.metadata.uid != uid or current.phase != before:
                return None  # it changed meanwhile; its event brings it back if still due
            return with_phase(current, phase, now)

        written = await modify(
            self.client,
            VirtualMachineInstance,
            vmi.metadata.name,
            vmi.metadata.namespace,
            change,
            status=True,
        )
        if written is not None and phase in ENDED and before != "Running":
            self.ended_early += 1
        return 0 if written is None else 1

    # --- what the store tells virt-handler -----------------------------------------------

    def _on_event(self, kind: type, event: WatchEvent[Any]) -> None:
        if kind is VirtualMachineInstance:
            self._on_vmi(event.object, deleted=event.type == "DELETED")

    def _on_vmi(self, vmi: VirtualMachineInstance, deleted: bool) -> None:
        key = vmi.key
        if deleted or vmi.phase in ENDED or not vmi.node_name:
            self._to_start.discard(key)
            self._to_stop.discard(key)
            return
        if vmi.being_deleted and vmi.phase in ("Scheduled", "Running"):
            self._to_stop.add(key)
        elif vmi.phase == "Scheduled":
            self._to_start.add(key)
